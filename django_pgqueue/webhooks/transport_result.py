"""What one delivery attempt's send came to, whatever carried it (HTTP or a broker).

Its own module so the HTTP transport and the broker publishers share it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TransportResult:
    """What happened to one POST. ``error`` is ``None`` when a response (any status) arrived.

    A 3xx response keeps its ``status_code`` and also sets ``error``: redirects are never
    followed and count as failures.
    """

    status_code: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    truncated: bool = False
    duration_ms: int = 0
    error: str | None = None
    address: str | None = None
    #: How the POST went out when that is worth knowing (a stale kept-alive connection
    #: replaced by a fresh one), whether it succeeded or not.
    note: str | None = None
    #: The headers the attempt sent, or tried to send before the connection failed, as
    #: they go on the wire: the HTTP request's, or the broker message's. Empty when the
    #: attempt was refused or not built. Not yet redacted: the attempt log applies
    #: ``webhooks/redaction.py``'s rule.
    request_headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True for a 2xx response, the only outcome that counts as delivered."""
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300

    @property
    def log_text(self) -> str:
        """The attempt log's ``error`` text: the error, then the note, if any.

        A delivered attempt has an empty text, or only the note, which starts with
        :data:`NOTE_PREFIX`.
        """
        if self.note is None:
            return self.error or ""
        if self.error is None:
            return NOTE_PREFIX + self.note
        return f"{self.error} ({NOTE_PREFIX}{self.note})"


#: How a note starts in the attempt log's ``error`` text.
NOTE_PREFIX = "note: "

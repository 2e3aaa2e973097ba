"""The claim loop's state, named: how a pass over the sources ended, which sources are
quiet, and the back-off after a failed claim.

``Worker._claim_loop`` repeats one *pass* (a claim from each source that is not quiet,
while slots are free) and then does what the pass's :class:`PassResult` calls for.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from typing import Any

from ..notify import WAKE_ALL


class PassResult(enum.Enum):
    """How a pass over the sources ended, which decides what the loop does next.

    Ordered by precedence: a pass that filled the slots is FULL even if an earlier
    source returned a full batch; one that got any full batch is FULL_BATCH even if a
    later source came back empty.
    """

    #: No free slot (or the rows held are above the refill level): wait until a task
    #: thread frees enough (it sets ``wake``) or a poll interval passes.
    FULL = "full"
    #: A source returned as many rows as asked: more may be due now; claim again at once.
    FULL_BATCH = "full_batch"
    #: Rows came back, fewer than asked: other workers took the rest (SKIP LOCKED) or
    #: the queue just ran dry. Ask once more before sleeping a poll interval.
    SHORT_BATCH = "short_batch"
    #: Nothing claimed: sleep a poll interval (a burst run checks whether it is done).
    EMPTY = "empty"

    @classmethod
    def of(cls, *, full: bool, full_batch: bool, claimed_any: bool) -> PassResult:
        if full:
            return cls.FULL
        if full_batch:
            return cls.FULL_BATCH
        return cls.SHORT_BATCH if claimed_any else cls.EMPTY


class QuietSources:
    """Sources not to ask until a NOTIFY for them arrives or a poll interval has passed.

    A source whose last claim came back empty is skipped for a poll interval: while
    one source is being drained the loop comes round once per batch, and an empty
    claim on the others each time would cost a statement and a commit per batch.
    A NOTIFY names the source it is for (its payload, ``notify.WAKE_*``, or a channel
    of the source's own): only that source is asked again. At a steady offered rate
    every pass follows a NOTIFY, and asking every source each time made each pass
    three claims long.
    """

    def __init__(self, poll_interval: float, sources: Sequence[Any]) -> None:
        self.poll_interval = poll_interval
        self.several = len(sources) > 1  # a lone source is always asked
        #: What wakes each source: its name and the other payloads it declares
        #: (``wakes_on``), and its own channels.
        self._woken_by = {
            s.name: {s.name, *getattr(s, "wakes_on", ()), *getattr(s, "channels", ())}
            for s in sources
        }
        self._until: dict[str, float] = {}

    def refresh(self, heard: set[str], recheck: set[str]) -> None:
        """Forget the quiet spells of the sources a NOTIFY named (``heard``; WAKE_ALL,
        also the sweep after a LISTEN reconnect, names every source) and of the
        sources in ``recheck`` (emptied here): their rows just finished, so their
        claim may find room (Source.claim_after_completion).
        """
        if heard:
            if WAKE_ALL in heard:
                self._until.clear()
            else:
                for name, woken_by in self._woken_by.items():
                    if woken_by & heard:
                        self._until.pop(name, None)
        while recheck:
            self._until.pop(recheck.pop(), None)

    def skip(self, name: str) -> bool:
        """Whether to leave source ``name`` out of this pass."""
        return self.several and self._until.get(name, 0.0) > time.monotonic()

    def claimed(self, name: str, rows: int) -> None:
        """Record a claim's size: an empty one makes the source quiet."""
        if rows:
            self._until.pop(name, None)
        else:
            self._until[name] = time.monotonic() + self.poll_interval

    def clear(self) -> None:
        """Ask every source again (a burst run saw work due)."""
        self._until.clear()


def failure_delay(failures: int) -> float:
    """Seconds to wait after the ``failures``-th claim failure in a row: 0.4 s doubling
    to 10 s, so a database restart is not hammered and a blip costs little."""
    return min(10.0, 0.2 * 2 ** min(failures, 6))

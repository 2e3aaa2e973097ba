"""Outgoing webhooks: endpoints, events, deliveries (queue rows) and the attempt log."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, URLValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..conf import DESTINATION_SCHEMES
from ..sql import PARKED_AT
from .expressions import OneOf
from .fields import StoredJSONField
from .queue import QueueRow, Status, queue_row_constraints, queue_row_indexes

# Endpoint URLs: an HTTP receiver or a broker destination (docs/webhooks.md,
# "Destinations"). This is only the generic shape; Endpoint.clean applies the rules.
_DESTINATION_URL = URLValidator(schemes=list(DESTINATION_SCHEMES))


def _masked(value: Any) -> Any:
    from ..webhooks.brokers.urls import masked

    return masked(value) if isinstance(value, str) else value


class MaskedURLMixin:
    """For a URL widget: write a broker URL's password as ``***``, be the value the
    stored URL or the one just typed into a form refused for another reason, so the
    password is never written into a page. Sent back as shown, ``Endpoint.clean``
    puts the stored password back."""

    def format_value(self, value: Any) -> str | None:
        return super().format_value(_masked(value))  # type: ignore[misc]


class MaskedURLInput(MaskedURLMixin, forms.URLInput):
    """The endpoint URL's input, password masked."""


class DestinationFormField(forms.URLField):
    """The form field of an endpoint's URL: any destination's shape, shown masked."""

    widget = MaskedURLInput
    default_validators = [_DESTINATION_URL]

    def has_changed(self, initial: Any, data: Any) -> bool:
        # The page showed the masked URL: sent back as shown, nothing changed.
        return super().has_changed(_masked(initial), data)


class DestinationURLField(models.URLField):
    """A URLField that also takes ``amqp://`` and ``nats://`` destinations.

    The column is the same varchar as a URLField's and validators live in Python only,
    so it deconstructs as a plain URLField: no migration.
    """

    default_validators = [_DESTINATION_URL]

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": DestinationFormField, **kwargs})

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.URLField", args, kwargs


class BreakerState(models.TextChoices):
    """Circuit breaker of one endpoint (see webhooks/breaker.py)."""

    CLOSED = "closed", _("Closed (delivering)")
    OPEN = "open", _("Open (paused after failures)")
    HALF_OPEN = "half_open", _("Half-open (one probe in flight)")


class RatePeriod(models.IntegerChoices):
    """The period an endpoint's rate limit counts requests in (seconds)."""

    SECOND = 1, _("per second")
    MINUTE = 60, _("per minute")
    HOUR = 3600, _("per hour")


class Ordering(models.TextChoices):
    """Delivery order of one endpoint (see docs/webhooks.md, "FIFO ordering")."""

    NONE = "none", _("None (in parallel, oldest first)")
    ENDPOINT = "endpoint", _("FIFO for the whole endpoint")
    KEY = "key", _("FIFO per ordering key")


class Application(models.Model):
    """One customer of a multi-tenant project (docs/multi-tenant.md).

    ``uid`` is the project's own id for the customer (``"cust_42"``); events sent with
    ``send_event(..., application="cust_42")`` reach only that application's endpoints.
    """

    uid = models.CharField(
        max_length=255,
        help_text=_("Your own id for this customer, e.g. 'cust_42' (what send_event takes)."),
    )
    name = models.CharField(max_length=255, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    is_active = models.BooleanField(
        default=True, help_text=_("Events cannot be sent to an inactive application.")
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True, editable=False)

    class Meta:
        db_table = "pgqueue_application"
        verbose_name = _("webhook application")
        verbose_name_plural = _("webhook applications")
        constraints = [
            models.UniqueConstraint(fields=["uid"], name="pgq_app_uid_uniq"),
            models.CheckConstraint(condition=~Q(uid=""), name="pgq_app_uid_set"),
        ]

    def __str__(self) -> str:
        return self.name or self.uid

    def clean(self) -> None:
        from ..webhooks.routing import check_application_uid

        try:
            check_application_uid(self.uid)
        except ValueError as exc:
            raise ValidationError({"uid": str(exc)}) from None


class Endpoint(models.Model):
    """A receiver URL, its signing secrets, the event types it wants and its breaker.

    ``secret`` is a property: the column (``secret``) only ever holds the Fernet
    ciphertext (see webhooks/crypto.py). Assigning ``endpoint.secret = "whsec_..."``
    or passing ``secret=`` to ``Endpoint.objects.create`` encrypts it; leaving it
    blank generates one when the endpoint is first saved. Once it is saved, its
    secret changes by ``operations.rotate_secret`` only, and ``save()`` writes its
    configuration only (:attr:`CONFIG_FIELDS`; docs/webhooks.md, "Who writes an
    endpoint").
    """

    url = DestinationURLField(
        # The help text is a migration's: broker destinations are in docs/webhooks.md.
        max_length=2048,
        help_text=_("Where events are POSTed (https unless ALLOW_HTTP)."),
    )
    # No index of its own: pgq_ep_app_idx answers the fan-out and the lookups.
    application = models.ForeignKey(
        Application,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="endpoints",
        db_index=False,
        help_text=_(
            "The customer this endpoint belongs to: it receives only that application's "
            "events. Empty: a global endpoint, receiving events sent without an application."
        ),
    )
    secret_ciphertext = models.TextField(
        db_column="secret", editable=False, default="", help_text=_("Encrypted signing secret.")
    )
    # Both read as a marker naming the problem if Python cannot decode them (a row
    # written past the doors): the admin opens the endpoint, and its form says what
    # to fix. The worker decodes them per delivery (webhooks/delivery_source.py).
    previous_secrets = StoredJSONField(
        default=list,
        blank=True,
        editable=False,
        help_text=_("Encrypted secrets still signing during a rotation, with their expiry."),
    )
    event_types = models.JSONField(
        default=list,
        blank=True,
        help_text=_("Event types to receive ('order.*' for a family); empty receives all."),
    )
    channels = models.JSONField(
        default=list,
        db_default=models.Value([], output_field=models.JSONField()),
        blank=True,
        help_text=_(
            "Channels to receive: only events carrying one of them. Empty receives every "
            "event whatever its channels."
        ),
    )
    headers = StoredJSONField(
        default=dict, blank=True, help_text=_("Extra HTTP headers sent with every delivery.")
    )
    description = models.TextField(blank=True, default="")
    is_active = models.BooleanField(
        default=True, help_text=_("Inactive endpoints get no new events and nothing is sent.")
    )
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    disabled_reason = models.TextField(blank=True, default="", editable=False)
    breaker_state = models.CharField(
        max_length=16, choices=BreakerState.choices, default=BreakerState.CLOSED, editable=False
    )
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    open_until = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("While the circuit is open: when the next probe may go out."),
    )
    breaker_cooldown = models.FloatField(
        default=0.0, editable=False, help_text=_("Current cool-down in seconds (grows).")
    )
    failing_since = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("First failure since the last success; drives auto-disable."),
    )
    last_success_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Flow control (docs/webhooks.md, "Fairness"): limits set by operators, and the
    # state the delivery claim keeps (written only under the claim's row lock).
    max_in_flight = models.IntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_(
            "Most deliveries to this endpoint in flight at once, across all workers. "
            "Empty: PGQUEUE['WEBHOOKS']['MAX_IN_FLIGHT']."
        ),
    )
    rate_limit = models.IntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Most requests per rate period (empty: no rate limit)."),
    )
    rate_period = models.IntegerField(
        choices=RatePeriod.choices,
        validators=[MinValueValidator(1)],
        default=RatePeriod.SECOND,
        help_text=_("The period the rate limit counts requests in."),
    )
    ordering = models.CharField(
        max_length=16,
        choices=Ordering.choices,
        default=Ordering.NONE,
        help_text=_(
            "FIFO: deliveries go one at a time in event order, for the whole endpoint or "
            "per ordering key. Applies to events sent after the change."
        ),
    )
    relay = models.BooleanField(
        default=False,
        db_default=False,
        help_text=_(
            "Relay mode (broker destinations only): events go to the broker in batches, "
            "in event order, one batch in flight; consumers fan out from the broker."
        ),
    )
    served_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("When a claim last took deliveries of this endpoint (the round robin)."),
    )
    rate_tat = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("Rate limit state: when the bucket is full again (GCRA)."),
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True, editable=False)

    #: The configuration columns: all that ``save()`` writes to an endpoint that exists
    #: (declared once; the admin's, the API's and the portal's edits are saves). The
    #: other columns have their own writers, so an edit form loaded a while ago can
    #: never write back a stale value of them: the run-time state (``is_active`` and
    #: its reason, the breaker, the claim's fairness and rate state) is written by the
    #: claim, the completion and the audited operations (``operations.py``); the
    #: secrets by ``rotate_secret`` and ``reencrypt_secrets`` (``webhooks/store.py``).
    CONFIG_FIELDS = (
        "url",
        "application",
        "description",
        "event_types",
        "channels",
        "headers",
        "max_in_flight",
        "rate_limit",
        "rate_period",
        "ordering",
        "relay",
        "updated_at",
    )

    class Meta:
        db_table = "pgqueue_endpoint"
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")
        constraints = [
            models.CheckConstraint(
                condition=OneOf("breaker_state", [s.value for s in BreakerState]),
                name="pgq_ep_breaker_valid",
            ),
            models.CheckConstraint(
                condition=Q(breaker_state=BreakerState.CLOSED) | Q(open_until__isnull=False),
                name="pgq_ep_open_has_until",
            ),
            models.CheckConstraint(
                condition=Q(max_in_flight__isnull=True) | Q(max_in_flight__gte=1),
                name="pgq_ep_max_in_flight_pos",
            ),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gte=1),
                name="pgq_ep_rate_limit_pos",
            ),
            models.CheckConstraint(condition=Q(rate_period__gte=1), name="pgq_ep_rate_period_pos"),
            models.CheckConstraint(
                condition=OneOf("ordering", [o.value for o in Ordering]),
                name="pgq_ep_ordering_valid",
            ),
            models.CheckConstraint(
                # A plaintext secret can never be stored, even by raw SQL.
                condition=~Q(secret_ciphertext__startswith="whsec_"),  # noqa: S106
                name="pgq_ep_secret_encrypted",
            ),
        ]
        indexes = [
            # The endpoints of one application (or the global ones, application NULL):
            # the fan-out reads one range of it, so its cost follows that application's
            # endpoints, not the number of applications (docs/multi-tenant.md, "Cost").
            # Also the portal's lists, the admin filter and the cascades.
            models.Index(fields=["application", "id"], name="pgq_ep_app_idx"),
        ]
        permissions = [
            ("manage_endpoint", "Can enable, disable, reset and test webhook endpoints"),
            (
                "manage_endpoint_secret",
                "Can reveal and rotate signing secrets of webhook endpoints",
            ),
        ]

    def __str__(self) -> str:
        return self.display_url

    def __repr__(self) -> str:
        return f"<Endpoint {self.pk}: {self.display_url}>"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Insert a new endpoint (every column: the defaults of the run-time state, and a
        generated secret when none was set), or write the configuration of an existing one
        (:attr:`CONFIG_FIELDS`) and nothing else, with no other effect.

        Changing another column on an existing endpoint and saving raises ValueError
        naming its operation: ``is_active`` by enabling or disabling, the breaker by
        resetting the circuit, the secret by rotating it (``django_pgqueue.operations``).
        """
        updating = not kwargs.get("force_insert") and not self._state.adding and self.pk
        if updating:
            fields = kwargs.get("update_fields")
            if fields is None:
                stored = getattr(self, "_stored_state", {})
                changed = sorted(
                    "secret" if name == "secret_ciphertext" else name
                    for name, value in stored.items()
                    if getattr(self, name) != value
                )
                if changed:
                    raise ValueError(
                        f"Endpoint.save() writes the configuration of endpoint {self.pk} "
                        f"only, and {', '.join(changed)} changed: that is written by its own "
                        f"operation (enable, disable or reset_circuit with "
                        f"operations.apply_endpoint_operation; a new secret with "
                        f"operations.rotate_secret)."
                    )
                kwargs["update_fields"] = self.CONFIG_FIELDS
            else:
                others = sorted(set(fields) - set(self.CONFIG_FIELDS))
                if others:
                    raise ValueError(
                        f"Endpoint.save(update_fields=...) writes configuration columns only "
                        f"({', '.join(self.CONFIG_FIELDS)}), got {', '.join(others)}"
                    )
        elif not self.secret_ciphertext:
            from ..webhooks.signing import generate_secret

            self.secret = generate_secret()
        from ..webhooks.brokers.urls import seal_password

        # A broker URL's password is stored encrypted, like the signing secret.
        self.url = seal_password(self.url)
        super().save(*args, **kwargs)
        self.remember_stored_state()

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> Endpoint:
        endpoint = super().from_db(db, field_names, values, **kwargs)
        endpoint.remember_stored_state()
        return endpoint

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        super().refresh_from_db(*args, **kwargs)
        fields = kwargs.get("fields", args[1] if len(args) > 1 else None)
        self.remember_stored_state(fields)

    def remember_stored_state(self, fields: Iterable[str] | None = None) -> None:
        """Note the values of the columns ``save()`` does not write, as the row holds
        them now (only ``fields`` of them, if given): ``save()`` refuses an instance on
        which one of them was changed, rather than silently not storing it. The store
        calls it after writing one of them."""
        wanted = None if fields is None else set(fields)
        state = getattr(self, "_stored_state", {})
        for name in self.state_fields():
            if name in self.__dict__ and (wanted is None or name in wanted):
                state[name] = getattr(self, name)
        self._stored_state = state

    @classmethod
    def state_fields(cls) -> list[str]:
        """The columns (their attnames) that ``save()`` does not write to an existing
        endpoint: everything but the configuration and the primary key."""
        return [
            f.attname
            for f in cls._meta.concrete_fields
            if f.name not in cls.CONFIG_FIELDS and not f.primary_key
        ]

    # -- secrets ---------------------------------------------------------------------

    @property
    def secret(self) -> str:
        """The current signing secret (decrypted; raises SecretDecryptionError on a bad key)."""
        from ..webhooks.crypto import decrypt_secret

        if not self.secret_ciphertext:
            return ""
        return decrypt_secret(self.secret_ciphertext, what=f"the secret of endpoint {self.pk}")

    @secret.setter
    def secret(self, value: str) -> None:
        from ..webhooks.crypto import encrypt_secret
        from ..webhooks.signing import parse_secret

        if not value:
            self.secret_ciphertext = ""
            return
        parse_secret(value)  # raises ValueError naming the problem, never the value
        self.secret_ciphertext = encrypt_secret(value)

    def active_secrets(self, now: dt.datetime | None = None) -> list[str]:
        """Secrets to sign with: the current one first, then unexpired previous ones."""
        from ..webhooks.crypto import decrypt_active_secrets

        return decrypt_active_secrets(
            self.secret_ciphertext,
            self.previous_secrets,
            now or timezone.now(),
            what=f"the secrets of endpoint {self.pk}",
        )

    @property
    def display_url(self) -> str:
        """The URL as shown: a broker destination's password replaced by ``***``."""
        from ..webhooks.brokers.urls import masked

        return masked(self.url)

    # -- validation ------------------------------------------------------------------

    def clean(self) -> None:
        from ..webhooks.brokers.urls import restore_password
        from ..webhooks.destinations import validate_url_with_settings
        from ..webhooks.signing import validate_custom_headers
        from ..webhooks.ssrf import UnsafeURLError, log_refusal

        errors: dict[str, str] = {}
        try:
            if "***" in self.url:
                # A new endpoint has no stored password: a masked one must be typed again.
                stored = Endpoint.objects.filter(pk=self.pk).values_list("url", flat=True)
                self.url = restore_password(self.url, (self.pk and stored.first()) or "")
            validate_url_with_settings(self.url)
        except UnsafeURLError as exc:
            # Never the password in a log line: the URL may carry one just typed.
            log_refusal(self.display_url, exc, where="save time")
            errors["url"] = f"This URL cannot receive webhooks: {exc}"
        try:
            validate_custom_headers(self.headers or {})
        except ValueError as exc:
            errors["headers"] = str(exc)
        from ..webhooks.routing import check_channels, check_subscriptions

        try:
            check_subscriptions(self.event_types)
        except ValueError as exc:
            errors["event_types"] = str(exc)
        try:
            check_channels(self.channels, name="channels")
        except ValueError as exc:
            errors["channels"] = str(exc)
        from ..webhooks.brokers.urls import is_broker_url

        if self.relay and "url" not in errors and not is_broker_url(self.url):
            errors["relay"] = (
                "Relay mode needs a broker destination (amqp:// or nats://): an HTTP "
                "receiver is sent one delivery at a time."
            )
        if errors:
            raise ValidationError(errors)


class Event(models.Model):
    """Something that happened, sent to every subscribed endpoint.

    ``body`` holds the payload's exact JSON text; every attempt POSTs (and signs) it
    inside the ``{"type", "timestamp", "data"}`` envelope, :meth:`request_body`.
    ``msg_id`` is the ``webhook-id`` header, the same across retries and endpoints.
    """

    event_type = models.CharField(max_length=255)
    application = models.ForeignKey(
        Application,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="events",
        db_index=False,
        help_text=_("The customer the event was sent for (empty: global endpoints)."),
    )
    # A database default too: rows written by older code or raw SQL carry none.
    channels = models.JSONField(
        default=list,
        db_default=models.Value([], output_field=models.JSONField()),
        blank=True,
        help_text=_("Channels the event was sent on."),
    )
    # Read as a marker naming the problem if Python cannot decode it (a row written
    # past send_event()): the admin and the API show the event instead of failing.
    payload = StoredJSONField()
    body = models.TextField(editable=False, help_text=_("The exact JSON sent (signed bytes)."))
    msg_id = models.CharField(max_length=64, editable=False)
    # NULL, not "": events without a key must not collide in the unique constraint.
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text=_("send_event with the same key returns this event instead of a new one."),
    )
    # Kept on the event (its deliveries to key-ordered endpoints carry it too) so that
    # a repeat with the same idempotency key is compared with everything it asked for.
    ordering_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        editable=False,
        help_text=_("The FIFO line it was sent in (empty: none)."),
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "pgqueue_event"
        verbose_name = _("webhook event")
        verbose_name_plural = _("webhook events")
        constraints = [
            models.CheckConstraint(condition=~Q(event_type=""), name="pgq_evt_type_set"),
            # Constraints rather than unique=True: no extra LIKE indexes to maintain.
            models.UniqueConstraint(fields=["msg_id"], name="pgq_evt_msg_id_uniq"),
            models.UniqueConstraint(fields=["idempotency_key"], name="pgq_evt_idem_key_uniq"),
        ]
        indexes = [
            # An application's events, newest first (the portal, the admin filter).
            models.Index(fields=["application", "-id"], name="pgq_evt_app_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.msg_id}"

    def request_body(self) -> str:
        """The JSON text each request for this event carries (webhooks/envelope.py)."""
        from ..webhooks.envelope import envelope_text

        return envelope_text(self.event_type, self.created_at, self.body)


class Delivery(QueueRow):
    """One event to one endpoint: a queue row the worker claims, POSTs and completes."""

    event = models.ForeignKey(
        Event, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    # NULL, not "": "" is the one line of an endpoint-wide FIFO endpoint.
    ordering_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        editable=False,
        help_text=_("FIFO line this delivery waits in (empty: not ordered)."),
    )

    class Meta:
        db_table = "pgqueue_delivery"
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        constraints = [
            *queue_row_constraints("pgq_dlv"),
            # One delivery per event and endpoint; also serves lookups by event.
            models.UniqueConstraint(fields=["event", "endpoint"], name="pgq_dlv_event_endpoint"),
        ]
        indexes = [
            # The due index leads with the endpoint: the claim walks the endpoints
            # with waiting deliveries and takes each one's oldest (sql.CLAIM_DELIVERIES).
            *queue_row_indexes("pgq_dlv", "endpoint_id", "next_attempt_at", "id"),
            # Deliveries in flight per endpoint (the concurrency limit). Only rows in
            # flight are in it: a few per endpoint, and no cost for finished rows.
            models.Index(
                fields=["endpoint_id"],
                name="pgq_dlv_flight_idx",
                condition=Q(status=Status.IN_PROGRESS),
            ),
            # The head of each FIFO line; only unfinished FIFO deliveries are in it.
            models.Index(
                fields=["endpoint_id", "ordering_key", "id"],
                name="pgq_dlv_fifo_idx",
                condition=Q(ordering_key__isnull=False)
                & Q(status__in=[Status.PENDING, Status.FAILED, Status.IN_PROGRESS]),
            ),
        ]
        permissions = [
            ("replay_delivery", "Can replay webhook deliveries or retry them now"),
            ("cancel_delivery", "Can cancel or dead-letter webhook deliveries"),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.pk} ({self.status})"

    @property
    def is_parked(self) -> bool:
        """Waiting for its endpoint to be enabled again (see ``sql.PARKED_AT``)."""
        return self.next_attempt_at is not None and self.next_attempt_at >= PARKED_AT

    @property
    def idempotency_key(self) -> str:
        """The ``Idempotency-Key`` header: the same on every attempt of this delivery."""
        return delivery_idempotency_key(self.event.msg_id, self.pk)


def delivery_idempotency_key(msg_id: str, delivery_id: int) -> str:
    return f"{msg_id}_{delivery_id}"


class DeliveryAttempt(models.Model):
    """One HTTP attempt of a delivery, written with the attempt's outcome."""

    # No foreign key in the database: the log is partitioned by day, and attaching or
    # dropping a partition with one would lock pgqueue_delivery against every claim
    # and completion until each transaction writing it had ended. Every writer keeps
    # the reference whole instead: an attempt is written by the statement that
    # updates its delivery, and every delete of deliveries (retention, endpoints,
    # applications, the ORM's cascade) deletes their attempts with them.
    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempts_log", db_constraint=False
    )
    attempt = models.IntegerField(validators=[MinValueValidator(1)])
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    #: What the attempt sent (HTTP request or broker message headers), with the
    #: values of credential headers redacted (webhooks/redaction.py).
    request_headers = models.JSONField(
        default=dict, db_default=models.Value({}, output_field=models.JSONField()), blank=True
    )
    response_headers = models.JSONField(default=dict, blank=True)
    response_body = models.TextField(blank=True, default="")
    response_truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    worker_id = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "pgqueue_delivery_attempt"
        verbose_name = _("webhook delivery attempt")
        verbose_name_plural = _("webhook delivery attempts")
        ordering = ["delivery_id", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(attempt__gte=1), name="pgq_att_attempt_positive"),
        ]

    def __str__(self) -> str:
        outcome = self.status_code or self.error or "?"
        return f"attempt {self.attempt} of delivery {self.delivery_id}: {outcome}"

    @property
    def succeeded(self) -> bool:
        # A delivered attempt's error text is empty, or a note on how it was sent.
        return (
            self.status_code is not None
            and 200 <= self.status_code < 300
            and (not self.error or self.error.startswith("note: "))
        )

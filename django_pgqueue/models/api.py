"""The HTTP API's keys and their rate-limit counters (docs/http-api.md)."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .webhooks import Application


class ApiScope(models.TextChoices):
    """What a key may do. A key holds one or more scopes; none implies another."""

    SEND = "send", _("Send events")
    READ = "read", _("Read endpoints, deliveries, applications and event types")
    MANAGE = "manage", _("Manage endpoints, deliveries and applications")
    #: Replacing an endpoint's signing secret: the admin's ``manage_endpoint_secret``,
    #: apart from ``manage`` as there (least privilege).
    SECRETS = "secrets", _("Rotate endpoint signing secrets")
    #: The job queues' flow control (operators' keys only: a queue is the fleet's).
    QUEUES = "queues", _("Read, configure, pause and resume job queues")
    #: A job's state, progress and outcome (operators' keys only: a job is the fleet's,
    #: of no application).
    JOBS = "jobs", _("Read jobs: state, progress, result or error")


class ApiKey(models.Model):
    """A bearer key of the HTTP API.

    Only the SHA-256 of the key is stored (``key_hash``): the key itself is shown once,
    when it is created (``pgqueue_api_key create`` or the admin). ``prefix``, the
    random part after ``pgq_``, is public: it finds the row, and it is what lists and
    logs show. The keys are 256 random bits, so a fast hash is as safe as a slow one
    here (there is no password to guess) and costs nothing per request.
    """

    name = models.CharField(max_length=255, help_text=_("Who or what uses this key."))
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    scopes = models.JSONField(
        default=list,
        help_text=_("What the key may do: 'send', 'read', 'manage' and/or 'secrets'."),
    )
    application = models.ForeignKey(
        Application,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_keys",
        help_text=_("Limit the key to this application's objects (empty: every application)."),
    )
    rate_limit = models.IntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Requests per rate window for this key (empty: PGQUEUE['API']['RATE_LIMIT'])."),
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text=_("Updated at most once a minute.")
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "pgqueue_api_key"
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")
        constraints = [
            models.UniqueConstraint(fields=["prefix"], name="pgq_apikey_prefix_uniq"),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gte=1),
                name="pgq_apikey_rate_pos",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (pgq_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ApiRateLimit(models.Model):
    """One key's rate-limit state: the GCRA "theoretical arrival time" (``tat``).

    Written only by ``sql/api.py``'s ``AUTHENTICATE`` (one UPSERT per request), a row
    per key, so the table stays as small as the key table.
    """

    key = models.OneToOneField(
        ApiKey, on_delete=models.CASCADE, primary_key=True, related_name="rate_state"
    )
    tat = models.DateTimeField(help_text=_("When the key's allowance is full again."))

    class Meta:
        db_table = "pgqueue_api_rate"
        verbose_name = _("API rate-limit state")
        verbose_name_plural = _("API rate-limit states")

    def __str__(self) -> str:
        return f"rate limit of key {self.key_id}: full at {self.tat}"

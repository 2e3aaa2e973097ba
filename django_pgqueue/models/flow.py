"""Queues of jobs as rows: each named queue's flow control (limits, pause) and the
state the claim keeps for it.

A queue needs no row to be used: jobs name their queue by ``queue_name`` and a queue
without a row has no limits and is never paused. A row is made by the first
``queues.configure`` or ``queues.pause`` of the queue, or by a worker applying
``PGQUEUE["QUEUES"]`` (not at enqueue, which is the hot path). Only
``django_pgqueue.queues`` writes the configuration columns; the claim
(``sql.CLAIM_JOBS``) writes ``served_at`` and ``rate_tat`` (and the per-key rate
state, :class:`QueueKeyRate`) under the row's lock, by their own statement, so a
configuration change never writes back a stale rate state.
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..queue_limits import CONCURRENCY_KEY_MAX_LENGTH, QUEUE_NAME_MAX_LENGTH

__all__ = ["CONCURRENCY_KEY_MAX_LENGTH", "QUEUE_NAME_MAX_LENGTH", "Queue", "QueueKeyRate"]


class Queue(models.Model):
    """One queue of jobs: its limits, whether it is paused, and the claim's state."""

    name = models.CharField(primary_key=True, max_length=QUEUE_NAME_MAX_LENGTH)
    concurrency = models.IntegerField(
        validators=[MinValueValidator(1)],
        null=True,
        blank=True,
        help_text=_(
            "Most jobs of this queue running at once, across every worker (empty: no limit)."
        ),
    )
    key_concurrency = models.IntegerField(
        validators=[MinValueValidator(1)],
        null=True,
        blank=True,
        help_text=_("Most jobs of one concurrency key running at once (empty: no limit)."),
    )
    rate_limit = models.IntegerField(
        validators=[MinValueValidator(1)],
        null=True,
        blank=True,
        help_text=_("Most jobs started per rate period (empty: no rate limit)."),
    )
    rate_period = models.IntegerField(
        validators=[MinValueValidator(1)],
        default=1,
        db_default=1,
        help_text=_("Seconds the rate limit counts starts in."),
    )
    key_rate_limit = models.IntegerField(
        validators=[MinValueValidator(1)],
        null=True,
        blank=True,
        help_text=_(
            "Most jobs of one concurrency key started per key rate period (empty: no limit)."
        ),
    )
    key_rate_period = models.IntegerField(
        validators=[MinValueValidator(1)],
        default=1,
        db_default=1,
        help_text=_("Seconds the per-key rate limit counts starts in."),
    )
    overridden_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "When the limits were last set at run time (configure, the admin, the API or "
            "the command); they then win over PGQUEUE['QUEUES'] until reset. Empty: the "
            "limits follow the settings."
        ),
    )
    paused_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When an operator paused the queue (empty: running).")
    )
    served_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("When a claim last took jobs of this queue (the claim's fence)."),
    )
    rate_tat = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("Rate limit state: when the bucket is full again (GCRA)."),
    )
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        db_table = "pgqueue_queue"
        verbose_name = _("queue")
        ordering = ("name",)
        permissions = [("pause_queue", "Can pause and resume queues")]
        constraints = [
            models.CheckConstraint(
                condition=Q(concurrency__isnull=True) | Q(concurrency__gte=1),
                name="pgq_queue_concurrency_pos",
            ),
            models.CheckConstraint(
                condition=Q(key_concurrency__isnull=True) | Q(key_concurrency__gte=1),
                name="pgq_queue_key_conc_pos",
            ),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gte=1),
                name="pgq_queue_rate_limit_pos",
            ),
            models.CheckConstraint(
                condition=Q(rate_period__gte=1), name="pgq_queue_rate_period_pos"
            ),
            models.CheckConstraint(
                condition=Q(key_rate_limit__isnull=True) | Q(key_rate_limit__gte=1),
                name="pgq_queue_key_rate_pos",
            ),
            models.CheckConstraint(
                condition=Q(key_rate_period__gte=1), name="pgq_queue_key_period_pos"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class QueueKeyRate(models.Model):
    """The per-key rate limit's state of one concurrency key in one queue (GCRA).

    Written only by the claim, under its queue row's lock, for the keys it started
    jobs of while the queue has a ``key_rate_limit``; a key without a row has a
    full bucket, so ``pgqueue_prune`` deletes the rows whose bucket is full again
    (``rate_tat`` past) and ``queues.configure`` those of a queue it clears the
    limit of.
    """

    queue = models.ForeignKey(
        Queue, on_delete=models.CASCADE, db_column="queue_name", related_name="key_rates"
    )
    key = models.CharField(max_length=CONCURRENCY_KEY_MAX_LENGTH)
    rate_tat = models.DateTimeField(
        help_text=_("When this key's bucket is full again (GCRA theoretical arrival time).")
    )

    class Meta:
        db_table = "pgqueue_queue_key_rate"
        verbose_name = _("queue key rate")
        constraints = [
            models.UniqueConstraint(fields=("queue", "key"), name="pgq_queue_key_rate_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.queue_id}/{self.key}"

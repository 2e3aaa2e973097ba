"""Queues of jobs as rows: each named queue's flow control (limits, pause) and the
state the claim keeps for it.

A queue needs no row to be used: jobs name their queue by ``queue_name`` and a queue
without a row has no limits and is never paused. A row is made by the first
``queues.configure`` or ``queues.pause`` of the queue (not at enqueue, which is the
hot path). Only ``django_pgqueue.queues`` writes the configuration columns; the
claim (``sql.CLAIM_JOBS``) writes ``served_at`` and ``rate_tat`` under the row's
lock, by their own statement, so a configuration change never writes back a stale
rate state.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

#: Longest queue name (``Job.queue_name``'s length).
QUEUE_NAME_MAX_LENGTH = 100
#: Longest concurrency key.
CONCURRENCY_KEY_MAX_LENGTH = 200


class Queue(models.Model):
    """One queue of jobs: its limits, whether it is paused, and the claim's state."""

    name = models.CharField(primary_key=True, max_length=QUEUE_NAME_MAX_LENGTH)
    concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_(
            "Most jobs of this queue running at once, across every worker (empty: no limit)."
        ),
    )
    key_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Most jobs of one concurrency key running at once (empty: no limit)."),
    )
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Most jobs started per rate period (empty: no rate limit)."),
    )
    rate_period = models.PositiveIntegerField(
        default=1, db_default=1, help_text=_("Seconds the rate limit counts starts in.")
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
        ]

    def __str__(self) -> str:
        return self.name

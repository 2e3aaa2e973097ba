"""The console's rollup: one row per (kind, name, minute) of finished work.

Written only by ``rollup/store.py``: by the completer, in the same transaction as
the batch of completions it counts (one upsert per batch), and by its depth
sample once a minute; a message queue's minutes by the maintenance thread's
sampler, from counters PostgreSQL keeps (the message queues' statements write
nothing for it); deleted by its own retention. The admin's charts read it, so a
page view never scans the history of jobs, deliveries or messages.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .fields import BigIntArrayField


class RollupKind(models.TextChoices):
    """What a rollup row counts."""

    QUEUE = "queue", _("job queue")
    ENDPOINT = "endpoint", _("endpoint")
    APPLICATION = "application", _("application")
    MESSAGE_QUEUE = "mq", _("message queue")


class Rollup(models.Model):
    """What one queue, endpoint, application or message queue did in one minute.

    ``ok``/``failed``/``retried``: jobs succeeded, died (or were cancelled) and
    were scheduled again; deliveries delivered, failed for good and retried;
    messages settled (deleted or archived), of those archived, and 0 (redeliveries
    are not counted). ``wait_hist`` and ``run_hist`` are counts per fixed
    logarithmic bucket (``rollup/histogram.py``) of the wait from due to start and
    of the run time (a delivery's latency), so a p95 is read from a minute's or an
    hour's rows without raw samples; a message queue's ``run_hist`` holds its
    messages sent in the minute and its sampler's counter marks instead
    (``rollup/store.py``, ``MQ_SENT``...). ``depth`` is the number of waiting rows
    (visible messages) sampled in that minute (NULL: not sampled).
    """

    pk = models.CompositePrimaryKey("kind", "name", "minute")
    kind = models.CharField(_("kind"), max_length=16, choices=RollupKind.choices)
    name = models.CharField(_("name"), max_length=255)
    minute = models.DateTimeField(_("minute"))
    ok = models.BigIntegerField(_("succeeded"), default=0)
    failed = models.BigIntegerField(_("failed"), default=0)
    retried = models.BigIntegerField(_("retried"), default=0)
    wait_hist = BigIntArrayField(default=list, blank=True)
    run_hist = BigIntArrayField(default=list, blank=True)
    depth = models.BigIntegerField(_("depth"), null=True, blank=True)

    class Meta:
        db_table = "pgqueue_rollup"
        verbose_name = _("rollup minute")
        verbose_name_plural = _("rollup minutes")
        indexes = [models.Index(fields=["minute"], name="pgqueue_rollup_minute")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {self.minute:%Y-%m-%d %H:%M}"

"""The registry of message queues (``django_pgqueue.mq``).

Each queue owns two tables created by ``mq.create`` (its messages and its archive),
so that one queue can be UNLOGGED without affecting the others; this model is the
list of those queues and their options. Only ``django_pgqueue.mq.store`` (and the
SQL API it installs) creates, changes or drops a row here, together with the
queue's tables.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class MessageQueue(models.Model):
    """One message queue: name, storage and dead-letter policy."""

    name = models.CharField(primary_key=True, max_length=47)
    unlogged = models.BooleanField(
        default=False,
        help_text=_("UNLOGGED message table: fast, and emptied by a database crash."),
    )
    max_reads = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("A message read this many times is dead-lettered on its next read."),
    )
    dead_letter = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        db_column="dead_letter",
        related_name="dead_letter_sources",
        help_text=_("Queue that receives dead letters (the queue's own archive if empty)."),
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "pgqueue_mq_queue"
        verbose_name = _("message queue")
        ordering = ("name",)
        permissions = [
            ("operate_messagequeue", "Can delete, archive or move messages of message queues"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_reads__isnull=True) | Q(max_reads__gte=1),
                name="pgqueue_mq_max_reads_positive",
            ),
            models.CheckConstraint(
                condition=Q(dead_letter__isnull=True) | Q(max_reads__isnull=False),
                name="pgqueue_mq_dead_letter_reads",
            ),
            models.CheckConstraint(
                condition=~Q(dead_letter=models.F("name")),
                name="pgqueue_mq_dead_letter_other",
            ),
        ]

    def __str__(self) -> str:
        return self.name

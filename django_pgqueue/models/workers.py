"""Worker heartbeats: one row per live ``runworkers`` process."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class WorkerHeartbeat(models.Model):
    """A worker process, as its last heartbeat described it.

    Written only by the worker's completer thread (``worker/heartbeat.py``, statements
    in ``sql/workers.py``) on the lease cadence; read by the admin dashboard and
    ``pgqueue_status``. A row whose ``last_seen_at`` is older than a lease belongs to
    a worker that is gone; such rows are pruned by the heartbeats of the others.
    """

    worker_id = models.CharField(_("worker id"), max_length=255, primary_key=True)
    host = models.CharField(_("host"), max_length=255)
    pid = models.IntegerField(_("process id"))
    version = models.CharField(_("version"), max_length=64)
    #: The queues it takes work from; empty means every queue.
    queues = models.JSONField(_("queues"), default=list)
    concurrency = models.IntegerField(_("concurrency"))
    started_at = models.DateTimeField(_("started at"))
    last_seen_at = models.DateTimeField(_("last seen at"))

    class Meta:
        db_table = "pgqueue_worker"
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ("-started_at",)

    def __str__(self) -> str:
        return self.worker_id

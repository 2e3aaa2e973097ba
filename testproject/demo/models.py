from django.db import models


class TaskRun(models.Model):
    """One row per execution of a recording task: tests count runs per job with it."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    pid = models.IntegerField()
    label = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["job_id"], name="demo_taskrun_job_idx")]

"""The flow-control mark: only jobs of queues that have a row go into the flow
claim's index (docs/flow-control.md).

``pgq_job_flow_due_idx`` held every waiting job, so every enqueue wrote it,
queue limits or none. Now a job carries ``flow_controlled`` (set at enqueue from
the queue's row, kept true to the rows by the claims) and the index holds marked
jobs only. The history table gets the column too (it has the live table's
columns). The jobs of queues that already have a row are marked here.
"""

import django.db.models.functions.comparison
from django.db import migrations, models

MARK_EXISTING = """
UPDATE pgqueue_job SET flow_controlled = true
WHERE status IN ('pending', 'failed', 'waiting')
  AND queue_name IN (SELECT name FROM pgqueue_queue)
"""

HISTORY_COLUMN = """
ALTER TABLE pgqueue_job_history
    ADD COLUMN flow_controlled boolean NOT NULL DEFAULT false
"""

HISTORY_COLUMN_REVERSE = "ALTER TABLE pgqueue_job_history DROP COLUMN flow_controlled"


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0023_queue_key_rate"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="job",
            name="pgq_job_flow_due_idx",
        ),
        migrations.AddField(
            model_name="job",
            name="flow_controlled",
            field=models.BooleanField(
                db_default=False,
                default=False,
                editable=False,
                help_text="Its queue is under flow control (limits or a pause).",
            ),
        ),
        migrations.RunSQL(HISTORY_COLUMN, HISTORY_COLUMN_REVERSE),
        migrations.RunSQL(MARK_EXISTING, migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("queue_name"),
                django.db.models.functions.comparison.Coalesce("concurrency_key", models.Value("")),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("next_attempt_at"),
                models.F("id"),
                condition=models.Q(
                    ("flow_controlled", True), ("status__in", ["pending", "failed"])
                ),
                name="pgq_job_flow_due_idx",
            ),
        ),
    ]

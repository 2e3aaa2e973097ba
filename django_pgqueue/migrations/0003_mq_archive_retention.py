"""Message queues may keep a partitioned archive (``mq.create(archive_retention=...)``).

A nullable column and two checks on the registry, a table of one row per queue:
instant. Existing queues keep their plain archives (``archive_retention`` NULL).
"""

import datetime

import django.db.models.functions.text
import django.db.models.lookups
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0002_partition_attempt_log"),
    ]

    operations = [
        migrations.AddField(
            model_name="messagequeue",
            name="archive_retention",
            field=models.DurationField(
                blank=True,
                editable=False,
                help_text="Set: the archive is partitioned by day of archived_at, and retention drops a day's partition once the whole day is older than this. Empty: one plain archive table, kept until you delete its rows.",
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="messagequeue",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("archive_retention__isnull", True),
                    models.Q(
                        ("archive_retention__gt", datetime.timedelta(0)),
                        ("archive_retention__lte", datetime.timedelta(days=36600)),
                    ),
                    _connector="OR",
                ),
                name="pgqueue_mq_archive_retention_range",
            ),
        ),
        migrations.AddConstraint(
            model_name="messagequeue",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("archive_retention__isnull", True),
                    django.db.models.lookups.LessThanOrEqual(
                        django.db.models.functions.text.Length("name"), 41
                    ),
                    _connector="OR",
                ),
                name="pgqueue_mq_partitioned_name_length",
            ),
        ),
    ]

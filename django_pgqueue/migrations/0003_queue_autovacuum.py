"""Per-table autovacuum settings for the two queue tables (see docs/performance.md).

Declared, with the reasons, in ``models/database_objects.py`` (``QUEUE_AUTOVACUUM``);
that declaration is never edited in place, so this migration keeps creating what it
created (a change is a new declaration and a new migration).
"""

from django.db import migrations

from django_pgqueue.models.database_objects import QUEUE_AUTOVACUUM


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0002_webhooks"),
    ]

    operations = [
        migrations.RunSQL(
            sql=QUEUE_AUTOVACUUM.set_sql(),
            reverse_sql=QUEUE_AUTOVACUUM.reset_sql(),
        ),
    ]

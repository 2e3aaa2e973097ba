"""pgmq's ``last_read_at`` on the tables of every existing message queue.

Each queue's tables are created by ``mq.create`` (or the SQL API's ``create``), not by
a migration, so this walks the registry. Adding a nullable column without a default
only changes the catalogue: no table is rewritten, whatever its size. Queues created
afterwards get the column from ``mq.sql.QUEUE_COLUMNS``.
"""

from django.db import migrations

# The table names come from the registry and reach SQL through format('%I'); a queue
# whose table is gone (dropped by hand) is skipped rather than failing the migration.
_ALTER = """
DO $$
DECLARE
    queue text;
    tbl text;
BEGIN
    FOR queue IN SELECT name FROM pgqueue_mq_queue LOOP
        FOREACH tbl IN ARRAY ARRAY['pgqueue_mq_q_' || queue, 'pgqueue_mq_a_' || queue] LOOP
            IF pg_catalog.to_regclass(pg_catalog.format('%I', tbl)) IS NOT NULL THEN
                EXECUTE pg_catalog.format(
                    'ALTER TABLE %I {action} COLUMN IF {exists} last_read_at {type}', tbl);
            END IF;
        END LOOP;
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0014_event_ordering_key_secrets_scope"),
    ]

    operations = [
        migrations.RunSQL(
            _ALTER.format(action="ADD", exists="NOT EXISTS", type="timestamptz"),
            reverse_sql=_ALTER.format(action="DROP", exists="EXISTS", type=""),
        ),
    ]

"""Per-table autovacuum settings for the two queue tables (see docs/performance.md).

Every job and delivery is written three times (enqueue, claim, completion) and its
state changes cannot be HOT updates (``status`` is in the partial indexes'
predicates), so each leaves dead index entries in the due and lease indexes. The
claim walks the due index from its head, where those entries gather; PostgreSQL's
default trigger (20% of the table dead) lets them pile up for hundreds of thousands
of jobs once the table holds history. These settings vacuum after about a thousand
dead rows plus 1% of the table, analyse often enough that the planner's idea of the
partial indexes stays current, and let the vacuum of these small, hot tables run at
a higher cost limit so it finishes quickly.
"""

from django.db import migrations

TABLES = ("pgqueue_job", "pgqueue_delivery")

SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.01, "
    "autovacuum_vacuum_threshold = 1000, "
    "autovacuum_vacuum_insert_scale_factor = 0.05, "
    "autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_analyze_threshold = 1000, "
    "autovacuum_vacuum_cost_limit = 2000"
)

RESET = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor, "
    "autovacuum_analyze_threshold, autovacuum_vacuum_cost_limit"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0002_webhooks"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[f"ALTER TABLE {table} SET ({SETTINGS})" for table in TABLES],
            reverse_sql=[f"ALTER TABLE {table} RESET ({RESET})" for table in TABLES],
        ),
    ]

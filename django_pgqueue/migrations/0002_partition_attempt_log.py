"""The webhook attempt log becomes a table partitioned by day, online.

``pgqueue_delivery_attempt`` is append-only: a row per HTTP (or broker) attempt,
written with the attempt's outcome and never changed. It is also the heaviest table
of the webhooks (request and response headers, up to ``RESPONSE_CAP`` bytes of
response body a row). Partitioned by RANGE on ``created_at``, one partition per UTC
day made ahead by the workers' maintenance, its retention
(``PGQUEUE["ATTEMPT_RETENTION_SECONDS"]``) drops whole partitions instead of
deleting rows (docs/operations.md, "History and retention").

The conversion keeps every row where it is and never holds a lock that writers wait
on for longer than a few catalogue changes, whatever the table's size:

1. A ``CHECK (created_at < cutoff)`` is added ``NOT VALID`` (new rows are checked
   from then on) and validated, which scans the table under ``SHARE UPDATE
   EXCLUSIVE``: attempts go on being written. The cutoff is two UTC midnights
   ahead, so no attempt written meanwhile can fail it.
2. A unique index on ``(id, created_at)``, the partitioned table's primary key, is
   built ``CONCURRENTLY``.
3. In one short transaction under ``ACCESS EXCLUSIVE``: the table is renamed to the
   partition that holds every day before the cutoff
   (``pgqueue_delivery_attempt_p<cutoff - 1 day>``, from ``MINVALUE``), its identity
   handed to the new partitioned parent (continuing from the largest id), its
   primary key swapped for the index of step 2, its foreign key to
   ``pgqueue_delivery`` dropped, and it is attached. The validated check proves the
   partition's bound, so the attach scans nothing; the existing index on
   ``delivery_id`` is adopted as the parent's.

4. The days from the cutoff to three days ahead get their partitions; after that
   the workers' maintenance makes them.

The log keeps no foreign key in the database (``db_constraint=False``): attaching
and dropping partitions would otherwise lock ``pgqueue_delivery`` against every
claim and completion, for as long as any transaction that wrote a delivery (a
``send_event`` in a long request, say) stays open. Its writers keep the reference
whole (``models/webhooks.py``).

A run interrupted after step 1 or 2 is resumed by ``migrate`` (each step is
skipped or redone as the catalogue shows). The reverse (``migrate django_pgqueue
0001``) copies every row back into one plain table in one transaction, which holds
the table for as long as the copy takes: prune the log first
(docs/operations.md, "Upgrading and rolling back").
"""

import datetime as dt
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

TABLE = "pgqueue_delivery_attempt"
DELIVERY_TABLE = "pgqueue_delivery"
#: Partitions made by the migration beyond today; maintenance keeps the same runway.
PREMADE_DAYS = 3
LEGACY_CHECK = "pgq_att_before_partitions"
LEGACY_KEY = "pgq_att_id_created_key"
#: The foreign key the squashed migration made (Django's name for it), which the way
#: back makes again.
SQUASHED_FK = "pgqueue_delivery_att_delivery_id_31cb000c_fk_pgqueue_d"
#: The partitioned table's primary key (the partition key must be part of it).
PARENT_KEY = "pgq_att_pkey"


def _day_name(day: dt.date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def _one(cursor: Any, statement: str, params: list[Any] | None = None) -> Any:
    cursor.execute(statement, params)
    row = cursor.fetchone()
    return None if row is None else row[0]


def _relkind(cursor: Any) -> str | None:
    return _one(cursor, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])


def _delivery_fk(cursor: Any) -> str:
    """The name of the foreign key ``delivery_id -> pgqueue_delivery`` (Django's)."""
    return _one(
        cursor,
        """SELECT conname FROM pg_constraint
           WHERE conrelid = to_regclass(%s) AND contype = 'f'
             AND confrelid = to_regclass(%s)""",
        [TABLE, DELIVERY_TABLE],
    )


def _delivery_index(cursor: Any) -> str:
    """The name of the index on ``delivery_id`` alone (Django's, for the foreign key)."""
    return _one(
        cursor,
        """SELECT ci.relname FROM pg_index AS i
           JOIN pg_class AS ci ON ci.oid = i.indexrelid
           JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
           WHERE i.indrelid = to_regclass(%s) AND i.indnatts = 1 AND a.attname = 'delivery_id'""",
        [TABLE],
    )


def partition(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if _relkind(cursor) != "r":
            return  # partitioned already
        cursor.execute("SET lock_timeout = '10s'")
        try:
            _partition(cursor)
        finally:
            cursor.execute("RESET lock_timeout")


def _partition(cursor: Any) -> None:
    today = _one(cursor, "SELECT (now() AT TIME ZONE 'UTC')::date")
    cutoff = _one(
        cursor,
        """SELECT pg_get_expr(c.conbin, c.conrelid) FROM pg_constraint AS c
           WHERE c.conrelid = to_regclass(%s) AND c.conname = %s""",
        [TABLE, LEGACY_CHECK],
    )
    if cutoff is None:  # step 1 (an interrupted run resumes with its own cutoff)
        cutoff_day = today + dt.timedelta(days=2)
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {LEGACY_CHECK} "
            f"CHECK (created_at < '{cutoff_day.isoformat()} 00:00:00+00') NOT VALID"
        )
    else:
        cutoff_day = dt.date.fromisoformat(cutoff.split("'")[1][:10])
    cursor.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {LEGACY_CHECK}")
    # Step 2; an index left invalid by an interrupted build is built again.
    if _one(
        cursor,
        "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
        [LEGACY_KEY],
    ):
        cursor.execute(f"DROP INDEX CONCURRENTLY {LEGACY_KEY}")
    cursor.execute(
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {LEGACY_KEY} ON {TABLE} (id, created_at)"
    )
    # Step 3, one transaction.
    legacy = _day_name(cutoff_day - dt.timedelta(days=1))
    bound = f"'{cutoff_day.isoformat()} 00:00:00+00'"
    cursor.execute("BEGIN")
    try:
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        fk = _delivery_fk(cursor)
        index = _delivery_index(cursor)
        old_key = _one(
            cursor,
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
            [TABLE],
        )
        last_id = _one(cursor, f"SELECT max(id) FROM {TABLE}")
        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {legacy}")
        cursor.execute(f"ALTER INDEX {index} RENAME TO {legacy}_delivery_id")
        cursor.execute(f"ALTER TABLE {legacy} ALTER COLUMN id DROP IDENTITY")
        cursor.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT {old_key}")
        cursor.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT {fk}")
        cursor.execute(
            f"ALTER TABLE {legacy} ADD CONSTRAINT {legacy}_pkey PRIMARY KEY USING INDEX {LEGACY_KEY}"
        )
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {legacy} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
            "PARTITION BY RANGE (created_at)"
        )
        cursor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {LEGACY_CHECK}")
        cursor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY")
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)",
            [TABLE, last_id or 1, last_id is not None],
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {PARENT_KEY} PRIMARY KEY (id, created_at)"
        )
        cursor.execute(f"CREATE INDEX {index} ON {TABLE} (delivery_id)")
        cursor.execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ({bound})"
        )
        cursor.execute("COMMIT")
    except BaseException:
        cursor.execute("ROLLBACK")
        raise
    # Step 4.
    day = cutoff_day
    while day <= today + dt.timedelta(days=PREMADE_DAYS):
        start, end = day, day + dt.timedelta(days=1)
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {_day_name(day)} PARTITION OF {TABLE} FOR VALUES "
            f"FROM ('{start.isoformat()} 00:00:00+00') TO ('{end.isoformat()} 00:00:00+00')"
        )
        day = end


def unpartition(apps: Any, schema_editor: Any) -> None:
    """Every attempt back into one plain table, in one transaction."""
    with schema_editor.connection.cursor() as cursor:
        if _relkind(cursor) != "p":
            return
        fk = SQUASHED_FK
        index = _delivery_index(cursor)
        plain = f"{TABLE}_plain"
        cursor.execute("BEGIN")
        try:
            cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
            cursor.execute(
                f"CREATE TABLE {plain} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            cursor.execute(f"INSERT INTO {plain} SELECT * FROM {TABLE}")
            last_id = _one(cursor, f"SELECT max(id) FROM {plain}")
            cursor.execute(f"DROP TABLE {TABLE}")
            cursor.execute(f"ALTER TABLE {plain} RENAME TO {TABLE}")
            cursor.execute(
                f"ALTER TABLE {TABLE} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY"
            )
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)",
                [TABLE, last_id or 1, last_id is not None],
            )
            cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id)")
            cursor.execute(f"CREATE INDEX {index} ON {TABLE} (delivery_id)")
            cursor.execute(
                f"ALTER TABLE {TABLE} ADD CONSTRAINT {fk} FOREIGN KEY (delivery_id) "
                f"REFERENCES {DELIVERY_TABLE} (id) DEFERRABLE INITIALLY DEFERRED"
            )
            cursor.execute("COMMIT")
        except BaseException:
            cursor.execute("ROLLBACK")
            raise


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY and the validation outside a long transaction.
    atomic = False

    dependencies = [("django_pgqueue", "0001_squashed_0024_job_flow_mark")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(partition, unpartition, elidable=False)],
            state_operations=[
                migrations.AlterField(
                    model_name="deliveryattempt",
                    name="delivery",
                    field=models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts_log",
                        to="django_pgqueue.delivery",
                    ),
                )
            ],
        )
    ]

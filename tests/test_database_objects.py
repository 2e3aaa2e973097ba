"""The migrated database holds the objects ``models/database_objects.py`` declares: the
queue tables' autovacuum settings and the trigger that parks a disabled endpoint's
deliveries (with its function)."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.db import connection

from django_pgqueue.models.database_objects import PARKING_TRIGGER, QUEUE_AUTOVACUUM

#: SHA-256 of the SQL that migration 0001 applies. A declaration an applied migration
#: uses must not change in place (an upgraded database would then differ from a fresh
#: one): add a new version and a migration (database_objects.py, "Changing one").
APPLIED = {
    "0001 QUEUE_AUTOVACUUM": "3df595f00025b800e78c3f8649592431ddf931f3a3de77005d8c8ce211ce0a67",
    "0001 PARKING_TRIGGER": "6be44f168e2f684a244ee2933f80a187a077e23266884643e10d619dfed0e64a",
}


def _normalised(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip().lower()


@pytest.mark.django_db
@pytest.mark.parametrize("table", QUEUE_AUTOVACUUM.tables)
def test_queue_tables_carry_the_declared_autovacuum_settings(table):
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
        (reloptions,) = cur.fetchone()
    assert set(reloptions or []) == QUEUE_AUTOVACUUM.reloptions()


@pytest.mark.django_db
def test_the_parking_trigger_is_the_declared_one():
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT pg_get_triggerdef(t.oid), t.tgenabled, p.proname, p.prosrc
            FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = t.tgfoid
            WHERE t.tgrelid = %s::regclass AND NOT t.tgisinternal
            """,
            [PARKING_TRIGGER.table],
        )
        rows = cur.fetchall()
    assert len(rows) == 1, rows  # the endpoint table has this trigger and no other
    definition, enabled, function, body = rows[0]
    expected = (
        f"CREATE TRIGGER {PARKING_TRIGGER.name} {PARKING_TRIGGER.events} ON "
        f"public.{PARKING_TRIGGER.table} FOR EACH ROW WHEN (({PARKING_TRIGGER.condition})) "
        f"EXECUTE FUNCTION {PARKING_TRIGGER.function}()"
    )
    assert _normalised(definition) == _normalised(expected)
    assert enabled == "O"  # fires in the default session_replication_role
    assert function == PARKING_TRIGGER.function
    assert body == PARKING_TRIGGER.body


def test_declarations_of_applied_migrations_are_not_edited_in_place():
    applied = {
        "0001 QUEUE_AUTOVACUUM": QUEUE_AUTOVACUUM.set_sql(),
        "0001 PARKING_TRIGGER": PARKING_TRIGGER.create_sql(),
    }
    digests = {k: hashlib.sha256("".join(v).encode()).hexdigest() for k, v in applied.items()}
    assert digests == APPLIED

"""Database objects the models' fields and ``Meta`` cannot declare: the queue tables'
autovacuum settings and the trigger that parks a disabled endpoint's deliveries.

Everything else in the schema (tables, partial indexes, CHECK constraints) is declared
on the models and carried by ``makemigrations``. These two are declared here, next to
the models, and the migration builds its SQL from these declarations
(``0001_squashed_0024_job_flow_mark``, which applies both).

``tests/test_database_objects.py`` reads the migrated database (``pg_class.reloptions``,
``pg_trigger``, ``pg_proc``) and compares it with these declarations.

**Changing one.** A migration must keep creating what it created when it was applied,
or a fresh database would differ from an upgraded one. So a declaration an applied
migration uses is never edited in place: add the new version beside it (for example
``QUEUE_AUTOVACUUM_2``), a migration that moves the database from the old version to
the new one, and point the test at the new version.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..states import CLAIMABLE, sql_list


@dataclass(frozen=True)
class StorageParameters:
    """``ALTER TABLE ... SET (...)`` storage parameters of some tables."""

    tables: tuple[str, ...]
    #: (parameter, value as written), in the order of the ALTER TABLE.
    parameters: tuple[tuple[str, str], ...]

    def set_sql(self) -> tuple[str, ...]:
        settings = ", ".join(f"{name} = {value}" for name, value in self.parameters)
        return tuple(f"ALTER TABLE {table} SET ({settings})" for table in self.tables)

    def reset_sql(self) -> tuple[str, ...]:
        names = ", ".join(name for name, _ in self.parameters)
        return tuple(f"ALTER TABLE {table} RESET ({names})" for table in self.tables)

    def reloptions(self) -> set[str]:
        """The entries ``pg_class.reloptions`` holds for each table once they are set."""
        return {f"{name}={value}" for name, value in self.parameters}


@dataclass(frozen=True)
class RowTrigger:
    """An ``AFTER ... FOR EACH ROW`` trigger and the PL/pgSQL function it executes."""

    name: str
    table: str
    #: When and on what it fires, as in CREATE TRIGGER: "AFTER UPDATE OF is_active".
    events: str
    #: The WHEN condition (without its parentheses).
    condition: str
    function: str
    #: The function's body: the text between the ``$$`` of CREATE FUNCTION.
    body: str

    def create_sql(self) -> tuple[str, ...]:
        return (
            f"\nCREATE FUNCTION {self.function}() RETURNS trigger\nLANGUAGE plpgsql AS "
            f"$${self.body}$$\n",
            f"\nCREATE TRIGGER {self.name}\n{self.events} ON {self.table}\n"
            f"FOR EACH ROW WHEN ({self.condition})\nEXECUTE FUNCTION {self.function}()\n",
        )

    def drop_sql(self) -> tuple[str, ...]:
        return (f"DROP TRIGGER {self.name} ON {self.table}", f"DROP FUNCTION {self.function}()")


#: Every job and delivery is written three times (enqueue, claim, completion) and its
#: state changes cannot be HOT updates (``status`` is in the partial indexes'
#: predicates), so each leaves dead index entries in the due and lease indexes. The
#: claim walks the due index from its head, where those entries gather; PostgreSQL's
#: default trigger (20% of the table dead) lets them pile up for hundreds of thousands
#: of jobs once the table holds history. These settings vacuum after about a thousand
#: dead rows plus 1% of the table, analyse often enough that the planner's idea of the
#: partial indexes stays current, and let the vacuum of these small, hot tables run at
#: a higher cost limit so it finishes quickly (docs/performance.md, "Autovacuum").
QUEUE_AUTOVACUUM = StorageParameters(
    tables=("pgqueue_job", "pgqueue_delivery"),
    parameters=(
        ("autovacuum_vacuum_scale_factor", "0.01"),
        ("autovacuum_vacuum_threshold", "1000"),
        ("autovacuum_vacuum_insert_scale_factor", "0.05"),
        ("autovacuum_analyze_scale_factor", "0.02"),
        ("autovacuum_analyze_threshold", "1000"),
        ("autovacuum_vacuum_cost_limit", "2000"),
    ),
)

# The waiting states, from their one declaration (states.CLAIMABLE).
_CLAIMABLE = sql_list(CLAIMABLE)

#: The delivery claim walks the due index (``next_attempt_at, id`` over pending and
#: failed rows) from its head and skips rows whose endpoint is disabled; a disabled
#: endpoint's backlog at the head of that index made every claim read through it
#: (about 60 ms with 100,000 such rows instead of about 2 ms). This trigger moves
#: those deliveries' ``next_attempt_at`` to a far-future instant (``sql.PARKED_AT``,
#: written out here) when ``is_active`` goes false, and back to now when it goes true
#: again, however the flag changed: the admin actions, the breaker's automatic disable,
#: ``QuerySet.update()`` or SQL. Parked rows are beyond every ``next_attempt_at <=
#: now()`` range scan; their state and attempts do not change.
PARKING_TRIGGER = RowTrigger(
    name="pgqueue_endpoint_parks_deliveries",
    table="pgqueue_endpoint",
    events="AFTER UPDATE OF is_active",
    condition="OLD.is_active IS DISTINCT FROM NEW.is_active",
    function="pgqueue_endpoint_active_changed",
    body=f"""
BEGIN
    IF NEW.is_active THEN
        UPDATE pgqueue_delivery SET next_attempt_at = now(), updated_at = now()
        WHERE endpoint_id = NEW.id AND status IN {_CLAIMABLE}
          AND next_attempt_at >= TIMESTAMPTZ '9999-01-01 00:00:00+00';
    ELSE
        UPDATE pgqueue_delivery
        SET next_attempt_at = TIMESTAMPTZ '9999-01-01 00:00:00+00', updated_at = now()
        WHERE endpoint_id = NEW.id AND status IN {_CLAIMABLE}
          AND next_attempt_at < TIMESTAMPTZ '9999-01-01 00:00:00+00';
    END IF;
    RETURN NULL;
END
""",  # noqa: S608 - module constants
)

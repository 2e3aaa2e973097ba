"""The webhook attempt log, partitioned by day: the online conversion of a table
filled by the previous release, the premade days, retention by whole partitions (no
DEFAULT partition), an interrupted retention finished by the next run, and the way
back to one table."""

from __future__ import annotations

import datetime as dt
from contextlib import closing

import psycopg
import pytest

from django_pgqueue import history, sql

from ..support.scratch import manage, scratch_databases

pytestmark = pytest.mark.django_db(databases=[])

SQUASHED = "0001_squashed_0024_job_flow_mark"
FAMILY = history.ATTEMPT_LOG

# One endpoint, event and delivery, then attempts of the previous 40 days.
OLD_ATTEMPTS = """
WITH ep AS (
    INSERT INTO pgqueue_endpoint (url, secret, previous_secrets, event_types, headers,
        description, is_active, disabled_reason, breaker_state, consecutive_failures,
        breaker_cooldown, created_at, updated_at, ordering, rate_period)
    VALUES ('https://example.com/hook', 'gAAAA-not-a-real-token', '[]', '[]', '{}', '', true, '',
        'closed', 0, 0, now(), now(), 'none', 1)
    RETURNING id
), ev AS (
    INSERT INTO pgqueue_event (event_type, payload, body, msg_id, created_at)
    VALUES ('t', '{}', '{}', 'msg_old', now()) RETURNING id
), d AS (
    INSERT INTO pgqueue_delivery (event_id, endpoint_id, status, attempts, max_attempts,
        next_attempt_at, worker_id, last_error, created_at, updated_at)
    SELECT ev.id, ep.id, 'failed', 40, 100, now(), '', '', now(), now() FROM ev, ep
    RETURNING id
)
INSERT INTO pgqueue_delivery_attempt (delivery_id, attempt, started_at, duration_ms,
    response_headers, response_body, response_truncated, error, worker_id, created_at)
SELECT d.id, i, now(), 1, '{}', 'body', false, '', 'w',
       now() - make_interval(days => i %% 40, secs => i)
FROM d, generate_series(1, %(n)s) AS i
"""

ONE_ATTEMPT = """
INSERT INTO pgqueue_delivery_attempt (delivery_id, attempt, started_at, duration_ms,
    response_headers, response_body, response_truncated, error, worker_id, created_at)
SELECT id, 1, now(), 1, '{}', '', false, '', 'w', %s FROM pgqueue_delivery LIMIT 1
RETURNING id, tableoid::regclass::text
"""


def rows(conn: psycopg.Connection, statement: str, *params: object) -> list[tuple]:
    return conn.execute(statement, params or None).fetchall()


def test_the_previous_release_s_attempts_are_partitioned_in_place_and_can_go_back():
    with scratch_databases("attempts") as (url,):
        manage("migrate", "-v", "0", url=url)
        manage("migrate", "django_pgqueue", SQUASHED, "-v", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(OLD_ATTEMPTS, {"n": 4000})
            before = rows(
                conn, "SELECT id, created_at, response_body FROM pgqueue_delivery_attempt"
            )
            assert len(before) == 4000
            (today,) = conn.execute(sql.TODAY_UTC).fetchone()

        manage("migrate", "-v", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert history.is_partitioned(conn, FAMILY)
            parts = history.partitions(conn, FAMILY)
            # The old table became the first partition, named by its last day (two
            # midnights ahead of the migration), then the premade days.
            days = [p.day for p in parts]
            assert days == [today + dt.timedelta(days=n) for n in range(1, 4)]
            assert all(p.attached_to == sql.ATTEMPT_TABLE for p in parts)
            after = rows(
                conn,
                "SELECT id, created_at, response_body FROM pgqueue_delivery_attempt",
            )
            assert sorted(after) == sorted(before)
            where = rows(
                conn, "SELECT DISTINCT tableoid::regclass::text FROM pgqueue_delivery_attempt"
            )
            assert where == [(parts[0].name,)]
            # Ids go on from the old table's; a row lands in its day's partition,
            # and a day with no partition is refused (there is no DEFAULT).
            (new_id, into) = conn.execute(ONE_ATTEMPT, ("now",)).fetchone()
            assert new_id == max(r[0] for r in before) + 1 and into == parts[0].name
            later = dt.datetime.combine(today + dt.timedelta(days=3), dt.time(12), tzinfo=dt.UTC)
            (_, into) = conn.execute(ONE_ATTEMPT, (later,)).fetchone()
            assert into == parts[-1].name
            with pytest.raises(psycopg.errors.CheckViolation, match="no partition"):
                conn.execute(ONE_ATTEMPT, (later + dt.timedelta(days=1),))
            # Maintenance makes the days after the premade ones, never one that
            # overlaps the first partition. It does not wait for a transaction that
            # wrote a delivery (the log has no foreign key to lock pgqueue_delivery
            # with): claims and completions never queue behind it.
            with psycopg.connect(url) as writer:
                writer.execute("UPDATE pgqueue_delivery SET updated_at = now()")
                conn.execute("SET lock_timeout = '1s'")
                assert history.ensure_partitions(conn, days_ahead=5, family=FAMILY) == 2
                conn.execute("RESET lock_timeout")
            assert history.ensure_partitions(conn, days_ahead=5, family=FAMILY) == 0
            total = conn.execute("SELECT count(*) FROM pgqueue_delivery_attempt").fetchone()[0]
            assert total == 4002

        # The documented way back: one plain table with every row, ids going on.
        manage("migrate", "django_pgqueue", SQUASHED, "-v", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert not history.is_partitioned(conn, FAMILY)
            assert history.partitions(conn, FAMILY) == []
            back = conn.execute("SELECT count(*), max(id) FROM pgqueue_delivery_attempt").fetchone()
            assert back == (4002, max(r[0] for r in before) + 2)
            (new_id, into) = conn.execute(ONE_ATTEMPT, ("now",)).fetchone()
            assert (new_id, into) == (back[1] + 1, sql.ATTEMPT_TABLE)


# Serial: it reads the cluster's WAL position, which another test's writes in the
# parallel pass would move too.
@pytest.mark.serial
def test_retention_drops_whole_days_and_an_interrupted_one_is_finished():
    with scratch_databases("attempt_retention") as (url,):
        manage("migrate", "-v", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(OLD_ATTEMPTS, {"n": 400})
            (today,) = conn.execute(sql.TODAY_UTC).fetchone()
            history.ensure_partitions(conn, days_ahead=5, family=FAMILY)
            first, second, *rest = history.partitions(conn, FAMILY)
            later = dt.datetime.combine(second.day, dt.time(6), tzinfo=dt.UTC)
            conn.execute(ONE_ATTEMPT, (later,))
            deliveries = conn.execute("SELECT count(*) FROM pgqueue_delivery").fetchone()

            # Nor does retention's detach and drop.
            # Closed on the way out whatever happens: an open one would fail the next test.
            with closing(psycopg.connect(url)) as writer:
                writer.execute("UPDATE pgqueue_delivery SET updated_at = now()")
                conn.execute("SET lock_timeout = '1s'")

                # Thirty days after the second partition's day ended, with a 30-day
                # retention: the first two go, whole; the rest stay.
                age = 30 * 86400.0
                as_of = second.end + dt.timedelta(days=30)
                dry = history.drop_expired(
                    conn, {"attempts": age}, family=FAMILY, now=as_of, dry_run=True
                )
                assert dry.dropped == {first.name: 400, second.name: 1}
                assert len(history.partitions(conn, FAMILY)) == len(rest) + 2
                wal = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
                done = history.drop_expired(conn, {"attempts": age}, family=FAMILY, now=as_of)
                assert set(done.dropped) == {first.name, second.name}
                (written,) = conn.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (wal,)
                ).fetchone()
                assert written < 1_000_000  # catalogue changes, not rows
                assert [p.name for p in history.partitions(conn, FAMILY)] == [p.name for p in rest]
                writer.rollback()
            conn.execute("RESET lock_timeout")
            assert conn.execute("SELECT count(*) FROM pgqueue_delivery_attempt").fetchone() == (0,)
            # The deliveries are not the log's: they stay, with their counts.
            assert conn.execute("SELECT count(*) FROM pgqueue_delivery").fetchone() == deliveries
            # Today has no partition now: maintenance makes it again.
            with pytest.raises(psycopg.errors.CheckViolation, match="no partition"):
                conn.execute(ONE_ATTEMPT, ("now",))
            assert history.ensure_partitions(conn, family=FAMILY) >= 1
            assert today in {p.day for p in history.partitions(conn, FAMILY)}

            # A retention killed between the detach and the drop leaves the partition
            # detached: the next run (pgqueue_prune here) drops it, whatever its age.
            victim = history.partitions(conn, FAMILY)[-1]
            conn.execute(f"ALTER TABLE {sql.ATTEMPT_TABLE} DETACH PARTITION {victim.name}")
            (left,) = [p for p in history.partitions(conn, FAMILY) if p.name == victim.name]
            assert left.attached_to is None
        said = manage("pgqueue_prune", url=url).stdout
        assert f"Dropped 1 partition(s): {victim.name}." in said, said
        assert "webhook attempts older than 30 day(s)" in said, said
        with psycopg.connect(url, autocommit=True) as conn:
            assert victim.name not in {p.name for p in history.partitions(conn, FAMILY)}

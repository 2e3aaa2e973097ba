"""``manage.py pgqueue_bench``: every workload next to its raw-SQL (or raw HTTP) reference.

Each workload runs ``repeat`` times; the reference of a workload is measured in the
same repetition, right before ours, so the ratios compare minutes of the same
(possibly noisy) machine. Everything runs in a scratch database created for the
run (``<name>_bench``, on the queue's database alias), migrated by a ``migrate``
subprocess pointed at it (``python -m django_pgqueue.bench``), and dropped at the
end unless ``keep``.

Workers are real ``runworkers`` subprocesses (``--skip-checks``), started the
same way an operator starts them.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from django.test.utils import override_settings
from psycopg import sql as pgsql

from .. import sql
from ..conf import get_settings
from ..db import connect, connection_params
from ..notify import WAKE_JOBS
from .guard import check_scratch_database
from .probes import read_latencies, stop, warm_up
from .rows import DRAIN_SPAN, Row, fmt, pctl
from .server import children

WORKLOADS = (
    "enqueue",
    "drain",
    "latency",
    "pickup",
    "webhooks",
    "fairness",
    "claim_cost",
    "notify",
    "mq",
    "tenant_fanout",
    "ingest",
    "relay",
    "workflows",
    "rollup",
)

#: "Many endpoints, one slow": endpoints, the slow one's answer time and backlog, and
#: the in-flight limit compared with none (events per healthy endpoint: --fair-events).
FAIR_ENDPOINTS = 50
FAIR_SLOW_SECONDS = 2.0
FAIR_SLOW_EVENTS = 40
FAIR_LIMIT = 2
FAIR_WORKER_UP = (
    "SELECT count(*) > 0 FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name LIKE 'pgqueue-worker-%'"
)
FAIR_HEALTHY_DONE = (
    "SELECT count(*) FROM pgqueue_delivery WHERE status = 'succeeded' AND endpoint_id <> %s"
)
FAIR_LATENCIES = """SELECT extract(epoch FROM a.started_at - ev.created_at) * 1000
FROM pgqueue_delivery_attempt AS a
JOIN pgqueue_delivery AS d ON d.id = a.delivery_id
JOIN pgqueue_event AS ev ON ev.id = d.event_id
WHERE a.attempt = 1 AND d.endpoint_id <> %s"""

#: Multi-tenant fan-out: endpoints per application and events timed per run.
TENANT_ENDPOINTS = 3
TENANT_EVENTS = 200
TENANT_WARM_UP = 20
#: ``%s`` applications in one statement, then TENANT_ENDPOINTS endpoints each.
TENANT_APPLICATIONS = f"""INSERT INTO {sql.APPLICATION_TABLE}
    (uid, name, metadata, is_active, created_at, updated_at)
SELECT 'bench_' || g, '', '{{}}', true, now(), now() FROM generate_series(1, %s) AS g"""  # noqa: S608 - identifiers are module constants
TENANT_ENDPOINT_ROWS = f"""INSERT INTO {sql.ENDPOINT_TABLE} (
    url, secret, previous_secrets, event_types, channels, headers, description, is_active,
    disabled_reason, breaker_state, consecutive_failures, breaker_cooldown, rate_period,
    ordering, created_at, updated_at, application_id)
SELECT 'https://bench.invalid/' || a.id || '/' || n, 'not-used', '[]', '[]', '[]', '{{}}', '',
       true, '', 'closed', 0, 0, 1, 'none', now(), now(), a.id
FROM {sql.APPLICATION_TABLE} AS a, generate_series(1, %s) AS n"""  # noqa: S608 - identifiers are module constants

#: Columns written by the raw single-row INSERT: the same row our enqueue writes.
RAW_INSERT = f"""INSERT INTO {sql.JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, updated_at, task_path, queue_name, backend, args, kwargs, worker_ids
) VALUES ('pending', 0, 0, 5, now(), '', '', '[]', now(), now(), %s, 'default', %s,
          '[]', '{{}}', '[]')"""  # noqa: S608 - identifiers are module constants

#: The raw ceiling: claim ``k`` due rows with one SKIP LOCKED statement ...
RAW_CLAIM = f"""UPDATE {sql.JOB_TABLE} SET status = 'in_progress', attempts = attempts + 1,
    locked_by = gen_random_uuid(), locked_until = now() + interval '30 seconds',
    started_at = now()
WHERE id IN (
    SELECT id FROM {sql.JOB_TABLE}
    WHERE status IN {sql.CLAIMABLE_SQL} AND next_attempt_at <= now()
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id"""  # noqa: S608 - identifiers are module constants
#: ... and complete them with one UPDATE.
RAW_COMPLETE = f"""UPDATE {sql.JOB_TABLE} SET status = 'succeeded', locked_until = NULL,
    finished_at = now()
WHERE id = ANY(%s)"""  # noqa: S608 - identifiers are module constants


#: 1,000,000 finished jobs in one statement (claim cost with history).
HISTORY_ROWS = f"""INSERT INTO {sql.JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, locked_by, worker_id,
    last_error, errors, created_at, updated_at, started_at, last_attempted_at, finished_at,
    task_path, queue_name, backend, args, kwargs, result, worker_ids
)
SELECT 'succeeded', 0, 1, 5, t, gen_random_uuid(), 'history', '', '[]', t, t, t, t, t,
       %s, 'default', %s, '[]', '{{}}', 'null', '["history"]'
FROM (SELECT now() - make_interval(secs => g) AS t FROM generate_series(1, %s) AS g) AS s"""  # noqa: S608 - identifiers are module constants


class Bench:
    """Runs the selected workloads and collects :class:`Row` objects."""

    def __init__(
        self,
        *,
        only: list[str] | None = None,
        repeat: int = 3,
        n_single: int = 2000,
        n_many: int = 10_000,
        n_drain: int = 20_000,
        drain_concurrency: list[int] | None = None,
        latency_probes: int = 100,
        latency_interval: float = 0.1,
        pickup_rate: float = 600.0,
        pickup_seconds: float = 5.0,
        pgmq_sql: str | None = None,
        pgmq_poll_ms: int = 10,
        history_rows: int = 1_000_000,
        claim_samples: int = 50,
        producers: int = 8,
        n_notify: int = 4000,
        n_webhooks: int = 2000,
        fair_events: int = 10,
        applications: int = 100_000,
        n_ingest: int = 2000,
        ingest_clients: list[int] | None = None,
        ingest_workers: int = 4,
        keep: bool = False,
        alias: str | None = None,
        out: Callable[[str], None] = print,
    ) -> None:
        self.only = only or list(WORKLOADS)
        unknown = sorted(set(self.only) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"unknown workload(s): {', '.join(unknown)}")
        self.repeat = repeat
        self.n_single = n_single
        self.n_many = n_many
        self.n_drain = n_drain
        self.drain_concurrency = drain_concurrency or [1, 4, 16]
        self.latency_probes = latency_probes
        self.latency_interval = latency_interval
        self.pickup_rate = pickup_rate
        self.pickup_seconds = pickup_seconds
        self.pgmq_sql = pgmq_sql
        self.pgmq_poll_ms = pgmq_poll_ms
        self.history_rows = history_rows
        self.claim_samples = claim_samples
        self.producers = producers
        self.n_notify = n_notify
        self.n_webhooks = n_webhooks
        self.fair_events = fair_events
        self.applications = applications
        self.n_ingest = n_ingest
        self.ingest_clients = ingest_clients or [8, 32]
        self.ingest_workers = ingest_workers
        self.keep = keep
        #: Longest a drain may take before the run is abandoned.
        self.timeout = max(120.0, n_drain / 100)
        self.alias = alias or get_settings().DATABASE
        self.out = out
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.backend_alias = self._our_backend_alias()
        self.original_name = connections[self.alias].settings_dict["NAME"]
        self.db_name = f"{self.original_name}_bench"[:63]

    # -- set-up ----------------------------------------------------------------------

    @staticmethod
    def _our_backend_alias() -> str:
        for alias, conf in getattr(settings, "TASKS", {}).items():
            if conf.get("BACKEND", "").endswith("PgQueueBackend"):
                return alias
        raise RuntimeError("No TASKS backend is django_pgqueue.backend.PgQueueBackend")

    def _admin_connection(self) -> psycopg.Connection:
        params = connection_params(self.alias)
        params["dbname"] = "postgres"
        return psycopg.connect(autocommit=True, **params)

    def _manage(self) -> list[str]:
        """How to start a management command in a child process, on the scratch database.

        Through ``python -m django_pgqueue.bench``, which points the queue's alias
        at it: the project's settings need not read a ``DATABASE_URL``, and the
        queue may live on any alias.
        """
        return [sys.executable, "-m", "django_pgqueue.bench", self.alias, self.db_name]

    def child_env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
        # ``python -m django`` finds the project through the working directory; a
        # supervisor's children are started from a script path, so say it outright.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p
        )
        env.update(extra)
        return env

    def create_database(self) -> None:
        """Create and migrate the scratch database and switch to it, or drop it again.

        The ``migrate`` child checks that it reaches the scratch database before it
        migrates; this process checks the same once it switched (guard.py), before any
        workload truncates or fills a table.
        """
        with self._admin_connection() as conn:
            name = pgsql.Identifier(self.db_name)
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}").format(name))
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(name))
        try:
            subprocess.run(
                [*self._manage(), "migrate", "--database", self.alias, "--verbosity", "0"],
                env=self.child_env(),
                check=True,
            )
            self._switch_to(self.db_name)
            check_scratch_database(self.db_name, self.alias)
        except BaseException:
            self.drop_database()
            raise

    def _switch_to(self, name: str) -> None:
        from ..notify import notifier

        notifier.close()
        connections.close_all()
        connections.settings[self.alias]["NAME"] = name
        connections[self.alias].settings_dict["NAME"] = name

    def drop_database(self) -> None:
        self._switch_to(self.original_name)
        if self.keep:
            self.out(f"Kept the scratch database {self.db_name}.")
            return
        with self._admin_connection() as conn:
            conn.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pgsql.Identifier(self.db_name)
                )
            )

    def conn(self) -> psycopg.Connection:
        """A plain autocommit psycopg connection to the scratch database."""
        return connect("bench", alias=self.alias, prepare=True)

    def sql(self, statement: str, params: Any = None) -> None:
        with self.conn() as conn:
            conn.execute(statement, params)

    def reset(self) -> None:
        self.sql(f"TRUNCATE {sql.JOB_TABLE}, {sql.WORKFLOW_TABLE}, {sql.EDGE_TABLE}")
        self.checkpoint()

    def checkpoint(self, vacuum: bool = False) -> None:
        with self.conn() as conn:
            if vacuum:
                conn.execute(f"VACUUM ANALYZE {sql.JOB_TABLE}")
            conn.execute("CHECKPOINT")

    def count(self, where: str) -> int:
        with self.conn() as conn:
            query = f"SELECT count(*) FROM {sql.JOB_TABLE} WHERE {where}"  # noqa: S608
            return one(conn, query)[0]

    def tasks(self) -> Any:
        from . import tasks

        return tasks

    def noop(self) -> Any:
        return self.tasks().noop.using(backend=self.backend_alias)

    def preload(self, n: int) -> None:
        from ..backend import enqueue_many

        for start in range(0, n, 50_000):
            enqueue_many(self.noop(), [((), {})] * min(50_000, n - start))
        connections[self.alias].close()

    # -- running -----------------------------------------------------------------------

    def run(self) -> list[Row]:
        self.out(f"Scratch database {self.db_name}; {self.repeat} repetition(s).")
        self.create_database()
        try:
            for name in WORKLOADS:
                if name in self.only:
                    self.out(f"-- {name}")
                    getattr(self, f"bench_{name}")()
        finally:
            self.drop_database()
        return self.rows

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    # 1. enqueue ------------------------------------------------------------------------

    def bench_enqueue(self) -> None:
        single = self.add(
            Row(
                "enqueue",
                "single, 1 per commit",
                "jobs/s",
                reference="raw INSERT per commit",
                target="≥ 90% of raw",
                goal=0.9,
                extra={"n": self.n_single},
            )
        )
        many = self.add(
            Row(
                "enqueue",
                f"enqueue_many({self.n_many:,})",
                "jobs/s",
                reference="raw executemany INSERT, 1 txn",
                target="≥ 80% of raw",
                goal=0.8,
                extra={"n": self.n_many},
            )
        )
        noop = self.noop()
        task_path = noop.module_path
        for rep in range(self.repeat):
            self.reset()
            with self.conn() as conn:
                t0 = time.perf_counter()
                for _ in range(self.n_single):
                    conn.execute(RAW_INSERT, (task_path, self.backend_alias))
                single.ref_values.append(self.n_single / (time.perf_counter() - t0))
            self.reset()
            connection = connections[self.alias]
            connection.ensure_connection()
            t0 = time.perf_counter()
            for _ in range(self.n_single):
                noop.enqueue()
            single.values.append(self.n_single / (time.perf_counter() - t0))
            assert self.count("status = 'pending'") == self.n_single

            self.reset()
            with self.conn() as conn, conn.transaction(), conn.cursor() as cur:
                t0 = time.perf_counter()
                cur.executemany(RAW_INSERT, [(task_path, self.backend_alias)] * self.n_many)
            many.ref_values.append(self.n_many / (time.perf_counter() - t0))
            self.reset()
            from ..backend import enqueue_many

            args: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((), {})] * self.n_many
            t0 = time.perf_counter()
            enqueue_many(noop, args)
            many.values.append(self.n_many / (time.perf_counter() - t0))
            assert self.count("status = 'pending'") == self.n_many
            self.out(
                f"   rep {rep + 1}: single {single.values[-1]:,.0f}/s "
                f"(raw {single.ref_values[-1]:,.0f}), many {many.values[-1]:,.0f}/s "
                f"(raw {many.ref_values[-1]:,.0f})"
            )
        connections.close_all()

    # 2 + 3. drain and its raw ceiling ------------------------------------------------------

    def raw_drain(self, n: int, k: int = 100) -> float:
        """The raw ceiling: one psycopg loop, claim ``k`` + complete, until empty."""
        self.reset()
        self.preload(n)
        self.checkpoint(vacuum=True)
        done = 0
        with self.conn() as conn:
            t0 = time.perf_counter()
            while True:
                ids = [r[0] for r in conn.execute(RAW_CLAIM, (k,)).fetchall()]
                if not ids:
                    break
                conn.execute(RAW_COMPLETE, (ids,))
                done += len(ids)
            elapsed = time.perf_counter() - t0
        if done != n:
            raise RuntimeError(f"raw drain finished {done} of {n} rows")
        return n / elapsed

    def worker_drain(
        self,
        n: int,
        concurrency: int,
        processes: int = 1,
        load: Callable[[int], None] | None = None,
    ) -> dict[str, float]:
        """Preload ``n`` no-ops (or what ``load(n)`` writes: workflows), run
        ``runworkers --burst`` and time it until it exits."""
        self.reset()
        (load or self.preload)(n)
        self.checkpoint(vacuum=True)
        argv = [
            *self._manage(),
            "runworkers",
            "--burst",
            "--skip-checks",
            "--concurrency",
            str(concurrency),
        ]
        if processes > 1:
            argv += ["--processes", str(processes)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=self.child_env())
        peak_rss = 0
        deadline = time.monotonic() + self.timeout
        while proc.poll() is None:
            peak_rss = max(peak_rss, rss_kib(proc.pid))
            if time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"the drain did not finish within {self.timeout:g} s")
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"runworkers exited with {proc.returncode}")
        with self.conn() as conn:
            done, span = one(conn, DRAIN_SPAN.format(table=sql.JOB_TABLE))
        if done != n:
            raise RuntimeError(f"drain finished {done} of {n} jobs")
        return {
            "wall": n / wall,
            "steady": n / float(span) if span else float("nan"),
            "rss_mib": peak_rss / 1024,
        }

    def bench_drain(self) -> None:
        n = self.n_drain
        ceiling = self.add(
            Row("raw ceiling", "psycopg loop, claim 100 + 1 UPDATE", "jobs/s", extra={"n": n})
        )
        configs = [(c, 1) for c in self.drain_concurrency]
        per_config: dict[tuple[int, int], dict[str, list[float]]] = {
            cfg: {"wall": [], "steady": [], "rss_mib": []} for cfg in configs
        }
        for rep in range(self.repeat):
            ceiling.values.append(self.raw_drain(n))
            line = [f"raw {ceiling.values[-1]:,.0f}/s"]
            for cfg in configs:
                result = self.worker_drain(n, *cfg)
                for key, value in result.items():
                    per_config[cfg][key].append(value)
                line.append(f"c{cfg[0]} {result['steady']:,.0f}/s ({result['wall']:,.0f} wall)")
            self.out(f"   rep {rep + 1}: " + ", ".join(line))
        best = max(configs, key=lambda cfg: statistics.median(per_config[cfg]["steady"]))
        pair = (best[0], 2)
        per_config[pair] = {"wall": [], "steady": [], "rss_mib": []}
        for rep in range(self.repeat):
            result = self.worker_drain(n, *pair)
            for key, value in result.items():
                per_config[pair][key].append(value)
            self.out(
                f"   rep {rep + 1}: 2 processes x c{pair[0]} {result['steady']:,.0f}/s "
                f"({result['wall']:,.0f} wall)"
            )
        for cfg in [*configs, pair]:
            concurrency, processes = cfg
            data = per_config[cfg]
            label = f"{processes} process{'es' if processes > 1 else ''} x {concurrency} thread" + (
                "s" if concurrency > 1 else ""
            )
            if cfg == best:
                label += " (best)"
            row = self.add(
                Row(
                    "drain",
                    label,
                    "jobs/s",
                    values=data["steady"],
                    reference="raw ceiling",
                    ref_values=ceiling.values,
                    extra={
                        "n": n,
                        "concurrency": concurrency,
                        "processes": processes,
                        "wall_jobs_per_s": data["wall"],
                        "rss_mib": data["rss_mib"],
                    },
                )
            )
            if processes == 1 and (concurrency == 1 or cfg == best):
                row.target, row.goal = "≥ 40% of raw ceiling", 0.4
            wall = self.add(
                Row(
                    "drain, incl. start-up",
                    label,
                    "jobs/s",
                    values=data["wall"],
                    reference="raw ceiling",
                    ref_values=ceiling.values,
                )
            )
            wall.extra = {"n": n}
            if processes == 1 and concurrency == max(self.drain_concurrency):
                self.add(
                    Row(
                        "worker RSS",
                        f"peak, {label}",
                        "MiB",
                        values=data["rss_mib"],
                        target="< 150 MiB",
                        better="lower",
                    )
                )

    # 4. wake-up latency --------------------------------------------------------------------

    def latency_once(self, notify: bool) -> list[float]:
        self.reset()
        fd, path = tempfile.mkstemp(prefix="pgqueue-bench-lat-")
        os.close(fd)
        argv = [*self._manage(), "runworkers", "--skip-checks", "--concurrency", "1"]
        if not notify:
            argv.append("--no-notify")
        probe = self.tasks().probe.using(backend=self.backend_alias)
        proc = subprocess.Popen(argv, env=self.child_env(), start_new_session=True)
        try:
            warm_up(probe, path)
            time.sleep(1.0)
            for seq in range(self.latency_probes):
                probe.enqueue(path, seq, time.time())
                time.sleep(self.latency_interval)
            deadline = time.monotonic() + 30
            while len(read_latencies(path)) < self.latency_probes + 1:
                if time.monotonic() > deadline:
                    raise RuntimeError("latency probes did not all run within 30 s")
                time.sleep(0.05)
        finally:
            stop(proc)
            connections.close_all()
        lat = read_latencies(path)
        os.unlink(path)
        return sorted(v for seq, v in lat.items() if seq >= 0)

    def bench_latency(self) -> None:
        for notify in (True, False):
            label = (
                "NOTIFY + LISTEN"
                if notify
                else (f"polling only ({get_settings().POLL_INTERVAL:g} s)")
            )
            rows = {
                p: self.add(
                    Row(
                        "wake-up latency",
                        f"{p}, {label}",
                        "ms",
                        better="lower",
                        target=({"p50": "≤ 3 ms", "p95": "≤ 10 ms"}.get(p, "") if notify else ""),
                    )
                )
                for p in ("p50", "p95", "max")
            }
            for rep in range(self.repeat):
                values = self.latency_once(notify)
                rows["p50"].values.append(pctl(values, 50))
                rows["p95"].values.append(pctl(values, 95))
                rows["max"].values.append(values[-1])
                self.out(
                    f"   rep {rep + 1} {label}: p50 {pctl(values, 50):.1f} ms, "
                    f"p95 {pctl(values, 95):.1f} ms, max {values[-1]:.1f} ms"
                )

    # 4b. steady-rate pickup (bench/pickup.py) ---------------------------------------------

    def bench_pickup(self) -> None:
        from .pickup import bench_pickup

        bench_pickup(self)

    # 5. webhooks ---------------------------------------------------------------------------

    def bench_webhooks(self) -> None:
        reason = webhooks_unavailable()
        if reason:
            self.notes.append(f"webhooks: skipped ({reason})")
            self.out(f"   skipped: {reason}")
            return
        from ..webhooks.fanout import serialize_payload

        with self.webhook_receiver() as base:
            url = f"{base}/hook"
            row = self.add(
                Row(
                    "webhooks",
                    "1 process, default concurrency",
                    "deliveries/s",
                    reference="requests.Session loop",
                    target="≥ 70% of raw",
                    goal=0.7,
                    extra={"n": self.n_webhooks},
                )
            )
            # One thread sends one request at a time on one connection, like the
            # reference: what is left is the per-delivery work, not the overlap.
            single = self.add(
                Row(
                    "webhooks",
                    "1 process x 1 thread",
                    "deliveries/s",
                    reference="requests.Session loop",
                    extra={"n": self.n_webhooks},
                )
            )
            payload = {"type": "bench", "data": {"id": 1}}
            # The very bytes a delivery of this payload sends.
            body = serialize_payload(payload).encode()
            for rep in range(self.repeat):
                # Alternate the order so drift on a shared machine favours neither.
                for step in (
                    ("raw", "ours", "single") if rep % 2 == 0 else ("single", "ours", "raw")
                ):
                    if step == "raw":
                        rate = self.webhook_reference(url, body)
                        row.ref_values.append(rate)
                        single.ref_values.append(rate)
                    elif step == "ours":
                        self.webhook_drain(url, payload, row, None)
                    else:
                        self.webhook_drain(url, payload, single, 1)
                self.out(
                    f"   rep {rep + 1}: ours {row.values[-1]:,.0f}/s, 1 thread "
                    f"{single.values[-1]:,.0f}/s (raw {row.ref_values[-1]:,.0f}/s)"
                )

    @contextmanager
    def webhook_receiver(self) -> Iterator[str]:
        """The bench receiver in its own process (no shared GIL); yields its base URL."""
        receiver = subprocess.Popen(
            [sys.executable, "-m", "django_pgqueue.bench.receiver"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            port = int(receiver.stdout.readline())  # type: ignore[union-attr]
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(receiver)
            if receiver.stdout is not None:
                receiver.stdout.close()

    def webhook_reference(self, url: str, body: bytes) -> float:
        """Posts/s of a bare ``requests.Session`` loop, after a warm-up."""
        import requests

        def post(session: requests.Session) -> None:
            session.post(
                url, data=body, headers={"content-type": "application/json"}, timeout=5
            ).raise_for_status()

        with requests.Session() as session:
            for _ in range(min(50, self.n_webhooks)):  # connection, imports, caches
                post(session)
            t0 = time.perf_counter()
            for _ in range(self.n_webhooks):
                post(session)
            return self.n_webhooks / (time.perf_counter() - t0)

    def webhook_drain(
        self, url: str, payload: dict[str, Any], row: Row, concurrency: int | None
    ) -> None:
        """Deliver ``n_webhooks`` events with one ``runworkers --burst``; adds to ``row``."""
        from ..models import Endpoint
        from ..webhooks.fanout import send_event
        from ..webhooks.signing import generate_secret

        self.sql(
            "TRUNCATE pgqueue_delivery_attempt, pgqueue_delivery, pgqueue_event, "
            "pgqueue_endpoint CASCADE"
        )
        endpoint = Endpoint(url=url)
        endpoint.secret = generate_secret()
        endpoint.save(force_insert=True)
        with override_settings(PGQUEUE={**getattr(settings, "PGQUEUE", {}), "NOTIFY": False}):
            for _ in range(self.n_webhooks):
                send_event("bench.event", payload)
        connections.close_all()
        self.checkpoint(vacuum=True)
        argv = [*self._manage(), "runworkers", "--burst", "--skip-checks"]
        if concurrency is not None:
            argv += ["--concurrency", str(concurrency)]
        t0 = time.perf_counter()
        subprocess.run(argv, env=self.child_env(), check=True)
        elapsed = time.perf_counter() - t0
        with self.conn() as conn:
            query = DRAIN_SPAN.format(table=sql.DELIVERY_TABLE)
            done, span = one(conn, query)
        if done != self.n_webhooks:
            raise RuntimeError(f"webhooks: {done} of {self.n_webhooks} delivered")
        row.values.append(self.n_webhooks / float(span))
        row.extra.setdefault("wall_per_s", []).append(self.n_webhooks / elapsed)

    # 6. fairness: many endpoints, one slow ------------------------------------------------

    def bench_fairness(self) -> None:
        reason = webhooks_unavailable()
        if reason:
            self.notes.append(f"fairness: skipped ({reason})")
            self.out(f"   skipped: {reason}")
            return
        config = (
            f"{FAIR_ENDPOINTS} endpoints, one slow ({FAIR_SLOW_SECONDS:g} s), "
            f"max_in_flight {FAIR_LIMIT}: healthy"
        )
        rows = {
            q: self.add(
                Row(
                    "webhooks",
                    f"{config} {q} latency",
                    "ms",
                    reference="no in-flight limit",
                    better="lower",
                    extra={"slow_events": FAIR_SLOW_EVENTS, "healthy_events": self.fair_events},
                )
            )
            for q in ("p50", "p99")
        }
        with self.webhook_receiver() as base:
            for rep in range(self.repeat):
                # Alternate the order so drift on a shared machine favours neither.
                for limit in (FAIR_LIMIT, None) if rep % 2 == 0 else (None, FAIR_LIMIT):
                    values = self.fairness_run(base, limit)
                    for q, p in (("p50", 50), ("p99", 99)):
                        side = rows[q].values if limit else rows[q].ref_values
                        side.append(pctl(values, p))
                self.out(
                    f"   rep {rep + 1}: healthy p50 {rows['p50'].values[-1]:.0f} ms, "
                    f"p99 {rows['p99'].values[-1]:.0f} ms (no limit: p50 "
                    f"{rows['p50'].ref_values[-1]:.0f} ms, p99 {rows['p99'].ref_values[-1]:.0f} ms)"
                )

    def fairness_run(self, base: str, limit: int | None) -> list[float]:
        """Healthy endpoints' latencies (ms, sorted): from each event's commit to the
        start of its delivery's first attempt, with a slow endpoint's backlog queued
        first. One ``runworkers`` at default concurrency, woken by NOTIFY."""
        from ..models import Endpoint
        from ..webhooks.fanout import send_event

        self.sql(
            "TRUNCATE pgqueue_delivery_attempt, pgqueue_delivery, pgqueue_event, "
            "pgqueue_endpoint CASCADE"
        )
        slow = Endpoint.objects.create(
            url=f"{base}/slow/{FAIR_SLOW_SECONDS:g}", event_types=["slow"], max_in_flight=limit
        )
        for i in range(FAIR_ENDPOINTS - 1):
            Endpoint.objects.create(url=f"{base}/hook/{i}", event_types=["ok"], max_in_flight=limit)
        connections.close_all()
        self.checkpoint(vacuum=True)
        worker = subprocess.Popen(
            [*self._manage(), "runworkers", "--skip-checks"],
            env=self.child_env(),
            start_new_session=True,
        )
        healthy = (FAIR_ENDPOINTS - 1) * self.fair_events
        try:
            with self.conn() as conn:
                deadline = time.monotonic() + 60
                while not one(conn, FAIR_WORKER_UP)[0]:
                    if time.monotonic() > deadline or worker.poll() is not None:
                        raise RuntimeError("fairness: the worker did not start")
                    time.sleep(0.05)
                for n in range(FAIR_SLOW_EVENTS):
                    send_event("slow", {"n": n})
                for n in range(self.fair_events):
                    send_event("ok", {"n": n})
                deadline = time.monotonic() + self.timeout
                while one(conn, FAIR_HEALTHY_DONE, [slow.pk])[0] < healthy:
                    if time.monotonic() > deadline:
                        raise RuntimeError("fairness: the healthy deliveries did not finish")
                    time.sleep(0.05)
                values = [float(r[0]) for r in conn.execute(FAIR_LATENCIES, [slow.pk]).fetchall()]
        finally:
            stop(worker)
        connections.close_all()
        return sorted(values)

    # 7. claim cost with history ------------------------------------------------------------

    def claim_times(self, pending: int) -> list[float]:
        """Median-ready claim statement times (ms), claiming 100 at a time."""
        self.sql(f"DELETE FROM {sql.JOB_TABLE} WHERE status <> 'succeeded'")  # noqa: S608
        self.preload(pending)
        self.checkpoint(vacuum=True)
        params = {
            "all_queues": True,
            "queues": [],
            "lease": 30.0,
            "worker_id": "bench",
            "limit": 100,
            "floor": None,  # a full claim (sql/jobs.py, the scan floor)
        }
        times = []
        with self.conn() as conn:
            for _ in range(self.claim_samples):
                t0 = time.perf_counter()
                rows = conn.execute(sql.CLAIM_JOBS, params).fetchall()
                times.append((time.perf_counter() - t0) * 1000)
                if not rows:
                    raise RuntimeError("claim came back empty: preload more rows")
        return times

    def bench_claim_cost(self) -> None:
        pending = self.claim_samples * 100 + 1000
        row = self.add(
            Row(
                "claim cost",
                f"median claim of 100, {self.history_rows:,} finished rows",
                "ms",
                reference="no finished rows",
                better="lower",
                target="≤ 1.5x none",
                goal=1.5,
            )
        )
        self.reset()
        for _ in range(self.repeat):
            row.ref_values.append(statistics.median(self.claim_times(pending)))
        self.sql(HISTORY_ROWS, (self.noop().module_path, self.backend_alias, self.history_rows))
        for rep in range(self.repeat):
            row.values.append(statistics.median(self.claim_times(pending)))
            self.out(
                f"   rep {rep + 1}: {row.values[-1]:.2f} ms with history, "
                f"{row.ref_values[rep]:.2f} ms without"
            )
        self.reset()

    # multi-tenant fan-out ----------------------------------------------------------------

    def fanout_times(self, applications: int) -> list[float]:
        """``send_event(application=...)`` times (ms, each in its own transaction) with
        ``applications`` applications of TENANT_ENDPOINTS endpoints each."""
        from django.db import transaction

        from ..webhooks.fanout import send_event

        self.sql(
            "TRUNCATE pgqueue_delivery_attempt, pgqueue_delivery, pgqueue_event, "
            "pgqueue_endpoint, pgqueue_application CASCADE"
        )
        self.sql(TENANT_APPLICATIONS, [applications])
        self.sql(TENANT_ENDPOINT_ROWS, [TENANT_ENDPOINTS])
        # Hint bits, the visibility map and statistics settled, dirty pages written:
        # the first events must not pay for the bulk load.
        self.sql(f"VACUUM ANALYZE {sql.APPLICATION_TABLE}, {sql.ENDPOINT_TABLE}")
        self.checkpoint()
        uid = f"bench_{applications // 2 + 1}"
        times = []
        for i in range(TENANT_WARM_UP + TENANT_EVENTS):
            t0 = time.perf_counter()
            with transaction.atomic(using=self.alias):
                send_event("order.paid", {"n": i}, application=uid, using=self.alias)
            if i >= TENANT_WARM_UP:
                times.append((time.perf_counter() - t0) * 1000)
        if self.count_deliveries() != (TENANT_WARM_UP + TENANT_EVENTS) * TENANT_ENDPOINTS:
            raise RuntimeError("tenant fan-out: a delivery is missing")
        connections.close_all()
        return times

    def count_deliveries(self) -> int:
        with self.conn() as conn:
            return one(conn, f"SELECT count(*) FROM {sql.DELIVERY_TABLE}")[0]  # noqa: S608

    def bench_tenant_fanout(self) -> None:
        row = self.add(
            Row(
                "tenant fan-out",
                f"median send_event to 1 of {self.applications:,} applications "
                f"x {TENANT_ENDPOINTS} endpoints",
                "ms",
                reference="1 application",
                better="lower",
                target="≤ 1.5x one",
                goal=1.5,
            )
        )
        for rep in range(self.repeat):
            # Alternate the order so drift on a shared machine favours neither.
            sizes = (1, self.applications) if rep % 2 == 0 else (self.applications, 1)
            for size in sizes:
                median = statistics.median(self.fanout_times(size))
                (row.ref_values if size == 1 else row.values).append(median)
            self.out(
                f"   rep {rep + 1}: {row.values[-1]:.2f} ms with {self.applications:,} "
                f"applications, {row.ref_values[-1]:.2f} ms with 1"
            )
        self.sql(
            "TRUNCATE pgqueue_delivery_attempt, pgqueue_delivery, pgqueue_event, "
            "pgqueue_endpoint, pgqueue_application CASCADE"
        )

    # 7. NOTIFY coalescing under concurrent producers ------------------------------------------

    def producers_rate(self, mode: str) -> float:
        """Enqueue ``n_notify`` jobs from ``producers`` threads, one job per commit."""
        from django.db import transaction

        base = dict(getattr(settings, "PGQUEUE", {}))
        conf = {**base, "NOTIFY": mode == "coalesced"}
        noop = self.noop()
        per_thread = self.n_notify // self.producers
        channel = get_settings().NOTIFY_CHANNEL
        barrier = threading.Barrier(self.producers + 1)
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                connections[self.alias].ensure_connection()
                barrier.wait()
                for _ in range(per_thread):
                    if mode == "per-enqueue":
                        with transaction.atomic(using=self.alias):
                            noop.enqueue()
                            with connections[self.alias].cursor() as cur:
                                cur.execute(sql.NOTIFY, [channel, WAKE_JOBS])
                    else:
                        noop.enqueue()
            except BaseException as exc:
                errors.append(exc)
            finally:
                connections.close_all()

        self.reset()
        with override_settings(PGQUEUE=conf):
            threads = [threading.Thread(target=produce) for _ in range(self.producers)]
            for thread in threads:
                thread.start()
            barrier.wait()
            t0 = time.perf_counter()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
        return per_thread * self.producers / elapsed

    def bench_notify(self) -> None:
        label = f"{self.producers} producers, 1 job per commit"
        coalesced = self.add(
            Row(
                "enqueue + NOTIFY",
                f"coalesced (default), {label}",
                "jobs/s",
                reference="no NOTIFY",
                target="≥ 90% of no NOTIFY",
                goal=0.9,
                extra={"n": self.n_notify},
            )
        )
        naive = self.add(
            Row(
                "enqueue + NOTIFY",
                f"NOTIFY in every transaction, {label}",
                "jobs/s",
                reference="no NOTIFY",
                extra={"n": self.n_notify},
            )
        )
        for rep in range(self.repeat):
            none = self.producers_rate("none")
            coalesced.ref_values.append(none)
            naive.ref_values.append(none)
            coalesced.values.append(self.producers_rate("coalesced"))
            naive.values.append(self.producers_rate("per-enqueue"))
            self.out(
                f"   rep {rep + 1}: none {none:,.0f}/s, coalesced "
                f"{coalesced.values[-1]:,.0f}/s, per enqueue {naive.values[-1]:,.0f}/s"
            )

    # 8. message queues (bench/mq.py) ------------------------------------------------------

    def bench_mq(self) -> None:
        from .mq import bench_message_queues

        bench_message_queues(self)

    # 9. workflows: chains and a wide fan-out and fan-in against plain jobs (bench/workflows.py)

    def bench_workflows(self) -> None:
        from .workflows import bench_workflows

        bench_workflows(self)

    # 10. the HTTP API's ingest on a real server (bench/ingest.py) ----------------------------

    def bench_ingest(self) -> None:
        from .ingest import bench_ingest

        bench_ingest(self)

    # 10. fan-out from PostgreSQL against the relay to a broker (bench/relay.py) ------------

    def bench_rollup(self) -> None:
        from .rollup import bench_rollup

        bench_rollup(self)

    def bench_relay(self) -> None:
        from .relay import bench_relay

        bench_relay(self, webhooks_unavailable())

    # -- output ------------------------------------------------------------------------------

    def table(self) -> str:
        header = (
            "workload",
            "config",
            "ours: median (min-max)",
            "unit",
            "reference",
            "reference: median (min-max)",
            "ratio",
            "target",
            "",
        )
        lines = [
            "| " + " | ".join(header) + " |",
            "|"
            + "|".join(["---", "---", "---:", "---", "---", "---:", "---:", "---", "---"])
            + "|",
        ]
        for row in self.rows:
            ratio = row.ratio()
            lines.append(
                "| "
                + " | ".join(
                    [
                        row.workload,
                        row.config,
                        fmt(row.values),
                        row.unit,
                        row.reference,
                        fmt(row.ref_values),
                        f"{ratio:.2f}x" if ratio is not None else "",
                        row.target,
                        row.verdict(),
                    ]
                )
                + " |"
            )
        for note in self.notes:
            lines.append(f"\n{note}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "repeat": self.repeat,
            "machine": machine(),
            "rows": [row.as_dict() for row in self.rows],
            "notes": self.notes,
        }


def one(conn: psycopg.Connection, query: str, params: Any = None) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate, ``SHOW``)."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query[:80]!r}")
    return row


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` and its children (KiB; 0 when unreadable)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def webhooks_unavailable() -> str:
    """Why the webhook workload cannot run here ("" when it can)."""
    try:
        from ..webhooks.delivery_source import DeliverySource  # noqa: F401
        from ..webhooks.fanout import send_event  # noqa: F401
    except ImportError as exc:
        return f"the webhook engine is not installed ({exc})"
    try:
        import requests  # noqa: F401
    except ImportError:
        return "requests is not installed"
    webhooks = get_settings().WEBHOOKS
    if not webhooks.get("ALLOW_HTTP"):
        return "PGQUEUE['WEBHOOKS']['ALLOW_HTTP'] is off, so a local http:// receiver is refused"
    import ipaddress

    loopback = ipaddress.ip_address("127.0.0.1")
    if not any(
        loopback in ipaddress.ip_network(n, strict=False)
        for n in webhooks.get("ALLOW_NETWORKS") or []
    ):
        return "127.0.0.1 is not in PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']"
    return ""


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        import django

        info["django"] = django.get_version()
        info["psycopg"] = psycopg.__version__
        with connect("bench-info", prepare=False) as conn:
            info["postgresql"] = one(conn, "SHOW server_version")[0]
    except Exception:  # noqa: S110 - informational only
        pass
    return info

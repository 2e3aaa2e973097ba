"""The message-queue rows of ``pgqueue_bench``: ours next to the real pgmq and raw SQL.

pgmq runs beside ours on the same PostgreSQL, installed SQL-only into its own
scratch database (``<bench db>_pgmq``) from the peer's ``pgmq.sql``: the path in
``PGQUEUE_BENCH_PGMQ_SQL``, else ``../shared/bench-peers/pgmq/pgmq.sql`` from the
working directory. pgmq is only run here, never shipped. Without that file the
pgmq rows are skipped with a note.

For every operation, in each repetition and in this order: the raw SQL statement
of the same shape (on a plain psycopg connection with prepared statements), pgmq's
function, then ours through the Python API (Django's connection, as an
application calls it). Each row is one (ours, reference) pair, so there are two
rows per operation: against pgmq (target ≥ 1.0x) and against raw SQL (≥ 0.8x).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from django.db import connections
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from .. import mq
from ..db import connection_params
from ..mq import sql as mq_sql

#: The running benchmark (``core.Bench``), which imports this module to run it:
#: typed loosely here so that neither module imports the other.
Bench = Any

QUEUE = "bench"
MESSAGE = {"to": "someone@example.com", "subject": "hello", "n": 1}
BATCH = 1000
#: Operations per turn when the systems are interleaved (one per commit).
CHUNK = 50


def pgmq_sql_path() -> Path | None:
    configured = os.environ.get("PGQUEUE_BENCH_PGMQ_SQL")
    candidates = [Path(configured)] if configured else []
    candidates.append(Path.cwd().parent / "shared" / "bench-peers" / "pgmq" / "pgmq.sql")
    return next((p for p in candidates if p.is_file()), None)


class PgmqPeer:
    """The real pgmq in its own scratch database."""

    def __init__(self, bench: Bench, script: Path) -> None:
        self.bench = bench
        self.db_name = f"{bench.db_name}_pgmq"[:63]
        self.opened: list[psycopg.Connection] = []
        with bench._admin_connection() as conn:
            name = pgsql.Identifier(self.db_name)
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}").format(name))
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(name))
        with self.conn() as conn:
            conn.execute(script.read_text())  # a multi-statement script: no parameters

    def conn(self) -> psycopg.Connection:
        params = connection_params(self.bench.alias)
        params["dbname"] = self.db_name
        return psycopg.connect(autocommit=True, **params)

    def close_opened(self) -> None:
        """Close the connections the wake-up probes opened."""
        for conn in self.opened:
            conn.close()
        self.opened.clear()

    def reset(self) -> None:
        with self.conn() as conn:
            if conn.execute("SELECT 1 FROM pgmq.meta WHERE queue_name = %s", [QUEUE]).fetchone():
                conn.execute("SELECT pgmq.drop_queue(%s)", [QUEUE])
            conn.execute("SELECT pgmq.create(%s)", [QUEUE])
            conn.execute("CHECKPOINT")

    def drop(self) -> None:
        self.close_opened()
        with self.bench._admin_connection() as conn:
            conn.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pgsql.Identifier(self.db_name)
                )
            )


def _ours_reset(bench: Bench) -> None:
    try:
        mq.drop(QUEUE)
    except mq.QueueError:
        pass
    mq.create(QUEUE)
    connections[bench.alias].close()
    bench.checkpoint()


def _statement(kind: str) -> str:
    return mq_sql.statement(kind, QUEUE)


def bench_message_queues(bench: Bench) -> None:
    from .rows import Row, pctl

    script = pgmq_sql_path()
    peer = PgmqPeer(bench, script) if script is not None else None
    if peer is None:
        bench.notes.append(
            "mq: pgmq.sql not found (PGQUEUE_BENCH_PGMQ_SQL); the pgmq rows were skipped."
        )
    n_single = bench.n_single
    n_read = max(BATCH, bench.n_many)
    ops = {
        "send": f"send, 1 per commit (n={n_single:,})",
        "batch": f"send_batch({BATCH:,}) (n={n_read:,})",
        "archive": f"read(qty=100) + archive (n={n_read:,})",
        "delete": f"read(qty=100) + delete (n={n_read:,})",
        "pop": f"pop (n={n_single:,})",
    }
    rows: dict[tuple[str, str], Row] = {}
    for op, config in ops.items():
        for ref, goal in (("pgmq", 1.0), ("raw", 0.8)):
            if ref == "pgmq" and peer is None:
                continue
            rows[op, ref] = bench.add(
                Row(
                    "message queues",
                    config,
                    "msgs/s",
                    reference="pgmq 1.5.1 SQL functions"
                    if ref == "pgmq"
                    else "raw SQL, same shape",
                    target=f"≥ {goal:.1f}x {ref}",
                    goal=goal,
                )
            )
    try:
        for rep in range(bench.repeat):
            results = _one_repetition(bench, peer, n_single, n_read, rep)
            for (op, ref), row in rows.items():
                row.ref_values.append(results[op][ref])
                row.values.append(results[op]["ours"])
            bench.out(
                f"   rep {rep + 1}: "
                + ", ".join(
                    f"{op} {r['ours']:,.0f}/s (pgmq {r.get('pgmq', 0):,.0f}, raw {r['raw']:,.0f})"
                    for op, r in results.items()
                )
            )
        _archive_growth(bench, n_read)
        _grouped_reads(bench, n_read)
        wake = {
            p: bench.add(
                Row(
                    "message queues",
                    f"read_with_poll wake-up after send commits, {p}",
                    "ms",
                    better="lower",
                    reference="pgmq read_with_poll (poll_interval_ms=100)" if peer else "",
                    target="≤ 5 ms" if p == "p50" else "",
                )
            )
            for p in ("p50", "p95")
        }
        for _ in range(bench.repeat):
            ours = _wakeups(
                lambda: _ours_reset(bench), _ours_reader, _ours_sender, bench.latency_probes
            )
            for p, row in wake.items():
                row.values.append(pctl(ours, int(p[1:])))
            if peer is not None:
                theirs = _wakeups(
                    peer.reset,
                    lambda: _pgmq_reader(peer),
                    lambda: _pgmq_sender(peer),
                    bench.latency_probes,
                )
                peer.close_opened()
                for p, row in wake.items():
                    row.ref_values.append(pctl(theirs, int(p[1:])))
            bench.out(f"   wake-up p50 {pctl(ours, 50):.1f} ms, p95 {pctl(ours, 95):.1f} ms")
    finally:
        for name in (QUEUE, HISTORY_QUEUE, GROUPED_QUEUE):
            try:
                mq.drop(name)
            except mq.QueueError:
                pass
        connections.close_all()
        if peer is not None:
            peer.drop()


def _one_repetition(
    bench: Bench, peer: PgmqPeer | None, n_single: int, n_read: int, rep: int
) -> dict[str, dict[str, float]]:
    """One measurement of every operation by every system, interleaved.

    Every operation here commits at least once per call, so it is bound by the WAL
    flush, whose latency on a shared machine drifts by several times within
    seconds. The systems therefore take turns, a chunk of calls each (in an order
    that rotates with ``rep``), and each one's time is the sum of its turns: the
    drift falls on all of them alike. Raw SQL and ours work on the same queue
    table (filled for both); pgmq on its own. Readers fetch whole messages (jsonb
    parsed), as a consumer would.
    """
    order = ["raw", "pgmq", "ours"] if peer is not None else ["raw", "ours"]
    shift = rep % len(order)
    order = order[shift:] + order[:shift]
    body = Jsonb(MESSAGE)
    jbatch = [body] * BATCH
    table = mq_sql.identifiers(QUEUE)["q"].as_string(None)  # a quoted identifier
    raw_send = f"INSERT INTO {table} (vt, message) VALUES (clock_timestamp(), %s) RETURNING msg_id"  # noqa: S608
    raw_batch = (
        f"INSERT INTO {table} (vt, message)"
        " SELECT clock_timestamp(), unnest(%s::jsonb[]) RETURNING msg_id"
    )
    read_sql, pop_sql = _statement("read"), _statement("pop")
    finish_sql = {"archive": _statement("archive"), "delete": _statement("delete")}
    ours_finish = {"archive": mq.archive, "delete": mq.delete}
    pgmq_finish = {
        "archive": "SELECT pgmq.archive(%s, %s::bigint[])",
        "delete": "SELECT pgmq.delete(%s, %s::bigint[])",
    }

    def ids(rows: list[tuple[Any, ...]]) -> list[int]:
        return [r[0] for r in rows]

    def array(msg_ids: list[int]) -> str:
        return "{" + ",".join(map(str, msg_ids)) + "}"

    out: dict[str, dict[str, float]] = {}
    with bench.conn() as raw, peer.conn() if peer else bench.conn() as theirs:

        def fill(n: int) -> None:
            """n waiting messages for each system (2n in the table raw and ours share)."""
            _ours_reset(bench)
            for start in range(0, 2 * n, BATCH):
                raw.execute(raw_batch, [jbatch[: min(BATCH, 2 * n - start)]])
            if peer is not None:
                peer.reset()
                for start in range(0, n, BATCH):
                    theirs.execute(
                        "SELECT pgmq.send_batch(%s, %s::jsonb[])",
                        [QUEUE, jbatch[: min(BATCH, n - start)]],
                    )
            bench.checkpoint()
            connections[bench.alias].ensure_connection()

        # Each step runs k calls and returns the number of messages they handled.
        fill(0)
        out["send"] = _interleaved(
            order,
            n_single,
            CHUNK,
            {
                "raw": lambda k: len([raw.execute(raw_send, [body]) for _ in range(k)]),
                "pgmq": lambda k: len(
                    [theirs.execute("SELECT pgmq.send(%s, %s)", [QUEUE, body]) for _ in range(k)]
                ),
                "ours": lambda k: len([mq.send(QUEUE, MESSAGE) for _ in range(k)]),
            },
        )
        fill(0)
        out["batch"] = _interleaved(
            order,
            max(1, n_read // BATCH),
            1,
            {
                "raw": lambda k: sum(
                    len(raw.execute(raw_batch, [jbatch]).fetchall()) for _ in range(k)
                ),
                "pgmq": lambda k: sum(
                    len(
                        theirs.execute(
                            "SELECT pgmq.send_batch(%s, %s::jsonb[])", [QUEUE, jbatch]
                        ).fetchall()
                    )
                    for _ in range(k)
                ),
                "ours": lambda k: sum(
                    len(mq.send_batch(QUEUE, [MESSAGE] * BATCH)) for _ in range(k)
                ),
            },
        )
        for op in ("archive", "delete"):
            fill(n_read)

            def raw_round(op: str = op) -> int:
                got = ids(raw.execute(read_sql, [100, 30]).fetchall())
                raw.execute(finish_sql[op], [array(got)])
                return len(got)

            def pgmq_round(op: str = op) -> int:
                got = ids(
                    theirs.execute("SELECT * FROM pgmq.read(%s, 30, 100)", [QUEUE]).fetchall()
                )
                theirs.execute(pgmq_finish[op], [QUEUE, got]).fetchall()
                return len(got)

            def ours_round(op: str = op) -> int:
                got = [m.msg_id for m in mq.read(QUEUE, 30, 100)]
                ours_finish[op](QUEUE, got)
                return len(got)

            out[op] = _interleaved(
                order,
                max(1, n_read // 100),
                5,
                {
                    "raw": _repeated(raw_round),
                    "pgmq": _repeated(pgmq_round),
                    "ours": _repeated(ours_round),
                },
            )
        fill(n_single)
        out["pop"] = _interleaved(
            order,
            n_single,
            CHUNK,
            {
                "raw": lambda k: sum(len(raw.execute(pop_sql, [1]).fetchall()) for _ in range(k)),
                "pgmq": lambda k: sum(
                    len(theirs.execute("SELECT * FROM pgmq.pop(%s)", [QUEUE]).fetchall())
                    for _ in range(k)
                ),
                "ours": lambda k: sum(len(mq.pop(QUEUE)) for _ in range(k)),
            },
        )
    connections.close_all()
    return out


def _interleaved(
    order: list[str], calls: int, chunk: int, steps: dict[str, Callable[[int], int]]
) -> dict[str, float]:
    """Messages per second of each system, the systems taking turns of ``chunk`` calls."""
    spent = dict.fromkeys(order, 0.0)
    handled = dict.fromkeys(order, 0)
    done = 0
    while done < calls:
        k = min(chunk, calls - done)
        for system in order:
            t0 = time.perf_counter()
            handled[system] += steps[system](k)
            spent[system] += time.perf_counter() - t0
        done += k
    return {system: handled[system] / max(spent[system], 1e-9) for system in order}


# -- a read's cost as the archive grows ---------------------------------------------------

HISTORY_QUEUE = "bench_history"

#: ``%s`` archived messages in one statement (the archive of HISTORY_QUEUE).
HISTORY_ROWS = """INSERT INTO {a} (msg_id, read_ct, enqueued_at, archived_at, vt, message)
SELECT g, 1, now(), now(), now(), '{{"n": 1}}' FROM generate_series(1, %s) AS g"""


def _archive_growth(bench: Bench, n_read: int) -> None:
    """read(100) + archive on a queue whose archive holds ``history_rows`` messages,
    next to the same on a queue with an empty archive, interleaved."""
    from .rows import Row

    row = bench.add(
        Row(
            "message queues",
            f"read(qty=100) + archive, {bench.history_rows:,} rows already archived",
            "msgs/s",
            reference="same, empty archive",
            target="≥ 0.9x (flat)",
            goal=0.9,
        )
    )
    history = pgsql.SQL(HISTORY_ROWS).format(a=mq_sql.identifiers(HISTORY_QUEUE)["a"])
    for name in (QUEUE, HISTORY_QUEUE):
        try:
            mq.drop(name)
        except mq.QueueError:
            pass
        mq.create(name)
    with bench.conn() as conn:
        conn.execute(history, [bench.history_rows])
        conn.execute(pgsql.SQL("VACUUM ANALYZE {}").format(mq_sql.identifiers(HISTORY_QUEUE)["a"]))
    for rep in range(bench.repeat):
        for name in (QUEUE, HISTORY_QUEUE):
            mq.send_batch(name, [MESSAGE] * min(BATCH, n_read))
            for _ in range(BATCH, n_read, BATCH):
                mq.send_batch(name, [MESSAGE] * BATCH)
        connections[bench.alias].close()
        bench.checkpoint()

        order = ["empty", "full"] if rep % 2 == 0 else ["full", "empty"]
        rates = _interleaved(
            order,
            max(1, n_read // 100),
            5,
            {"empty": _read_archive(QUEUE), "full": _read_archive(HISTORY_QUEUE)},
        )
        row.values.append(rates["full"])
        row.ref_values.append(rates["empty"])
        bench.out(
            f"   archive growth: {rates['full']:,.0f}/s with {bench.history_rows:,} archived, "
            f"{rates['empty']:,.0f}/s with none"
        )
    connections.close_all()


def _read_archive(
    name: str, read: Callable[[str, float, int], list[Any]] = mq.read
) -> Callable[[int], int]:
    """k rounds of ``read(qty=100)`` + archive on queue ``name``; the messages handled."""

    def run(k: int) -> int:
        done = 0
        for _ in range(k):
            got = [m.msg_id for m in read(name, 30, 100)]
            mq.archive(name, got)
            done += len(got)
        return done

    return run


# -- FIFO group reads ---------------------------------------------------------------------

GROUPED_QUEUE = "bench_grouped"
#: Groups the grouped-read workload spreads its messages over (x-pgmq-group).
GROUPS = 100


def _grouped_reads(bench: Bench, n_read: int) -> None:
    """read_grouped / read_grouped_rr (qty=100) + archive on a queue with the FIFO index,
    next to read(qty=100) + archive of the same messages (same groups, same headers) on
    another queue, interleaved. pgmq 1.5.1 has no grouped reads: the reference is our
    own plain read, so the row shows what keeping groups in order costs."""
    from .rows import Row

    kinds = {"read_grouped": mq.read_grouped, "read_grouped_rr": mq.read_grouped_rr}
    rows = {
        kind: bench.add(
            Row(
                "message queues",
                f"{kind}(qty=100) + archive, {GROUPS} groups, FIFO index (n={n_read:,})",
                "msgs/s",
                reference="read(qty=100) + archive, same messages",
                target="≥ 0.5x",
                goal=0.5,
            )
        )
        for kind in kinds
    }
    headers = [{"x-pgmq-group": f"g{i % GROUPS}"} for i in range(BATCH)]
    for rep in range(bench.repeat):
        for kind, read_grouped in kinds.items():
            for name in (QUEUE, GROUPED_QUEUE):
                try:
                    mq.drop(name)
                except mq.QueueError:
                    pass
                mq.create(name)
                for _ in range(0, n_read, BATCH):
                    mq.send_batch(name, [MESSAGE] * BATCH, headers=headers)
            mq.create_fifo_index(GROUPED_QUEUE)
            connections[bench.alias].close()
            bench.checkpoint()

            order = ["plain", "grouped"] if rep % 2 == 0 else ["grouped", "plain"]
            rates = _interleaved(
                order,
                max(1, n_read // 100),
                5,
                {
                    "plain": _read_archive(QUEUE),
                    "grouped": _read_archive(GROUPED_QUEUE, read_grouped),
                },
            )
            rows[kind].values.append(rates["grouped"])
            rows[kind].ref_values.append(rates["plain"])
            bench.out(f"   {kind}: {rates['grouped']:,.0f}/s, read {rates['plain']:,.0f}/s")
    connections.close_all()


# -- read_with_poll wake-up ------------------------------------------------------------


def _repeated(one_round: Callable[[], int]) -> Callable[[int], int]:
    """``k`` rounds of ``one_round``, returning the messages they handled."""
    return lambda k: sum(one_round() for _ in range(k))


def _ours_reader() -> Callable[[], float | None]:
    def read() -> float | None:
        got = mq.read_with_poll(QUEUE, vt=30, qty=1, max_poll_seconds=5, poll_interval=1.0)
        if not got:
            return None
        woke = time.perf_counter()
        mq.delete(QUEUE, [m.msg_id for m in got])
        return woke

    return read


def _ours_sender() -> Callable[[], None]:
    def send() -> None:
        mq.send(QUEUE, MESSAGE)

    return send


def _pgmq_reader(peer: PgmqPeer) -> Callable[[], float | None]:
    conn = peer.conn()
    peer.opened.append(conn)

    def read() -> float | None:
        rows = conn.execute(
            "SELECT msg_id FROM pgmq.read_with_poll(%s, 30, 1, 5, 100)", [QUEUE]
        ).fetchall()
        if not rows:
            return None
        woke = time.perf_counter()
        conn.execute("SELECT pgmq.delete(%s, %s::bigint[])", [QUEUE, [r[0] for r in rows]])
        return woke

    return read


def _pgmq_sender(peer: PgmqPeer) -> Callable[[], None]:
    conn = peer.conn()
    peer.opened.append(conn)

    def send() -> None:
        conn.execute("SELECT pgmq.send(%s, %s)", [QUEUE, Jsonb(MESSAGE)])

    return send


def _wakeups(
    reset: Callable[[], None],
    reader: Callable[[], Callable[[], float | None]],
    sender: Callable[[], Callable[[], None]],
    probes: int,
) -> list[float]:
    """Milliseconds from a send's commit to the waiting reader's return, sorted."""
    reset()
    woke: list[float] = []
    ready = threading.Event()
    done = threading.Event()

    def read_loop() -> None:
        read = reader()
        ready.set()
        try:
            while not done.is_set():
                at = read()
                if at is not None:
                    woke.append(at)
        finally:
            connections.close_all()

    thread = threading.Thread(target=read_loop, daemon=True)
    thread.start()
    ready.wait(10)
    send = sender()
    time.sleep(0.5)  # the reader is waiting
    sent: list[float] = []
    for i in range(probes):
        send()
        sent.append(time.perf_counter())
        deadline = time.monotonic() + 5
        while len(woke) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.0005)
        # 100 ms apart as the job wake-up probes (beyond the NOTIFY coalescing window),
        # with a jitter that keeps them off any poll's rhythm.
        time.sleep(0.1 + 0.013 * (i % 5))
    done.set()
    thread.join(10)
    return sorted((w - s) * 1000 for s, w in zip(sent, woke, strict=False))

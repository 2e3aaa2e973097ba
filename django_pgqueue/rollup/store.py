"""The rollup store: the one writer of ``pgqueue_rollup`` rows, and their reads.

* ``complete_counted_jobs``: the completer's batch of job outcomes, aggregated here
  into one row per queue and added to the current minute by the batch's own
  completion statement (``worker/sources.JobSource``).
* ``complete_counted_deliveries``: the same for webhook deliveries, per endpoint and
  per application (``webhooks/delivery_source``), in the delivery completion's
  statement.
* ``sample_depth``: each queue's backlog, once a minute, by the first worker to ask.
* ``sample_message_queues``: each message queue's minute (sent, settled, archived,
  depth) from counters PostgreSQL keeps anyway, once a minute, by the first worker's
  maintenance thread to ask: the message queues' own statements write nothing for it.
* ``read``: a kind's minutes for the admin's charts; ``prune``: retention
  (``PGQUEUE["ROLLUP_RETENTION_SECONDS"]``, run by ``pgqueue_prune``).

Statements in ``sql/rollup.py``. Functions taking ``conn`` run on one of the
worker's autocommit psycopg connections (or the prune's).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import psycopg
from django.db import connections

from .. import sql
from ..conf import get_settings
from ..db import array_literal, is_connection_error, text_array_literal
from ..models.rollup import RollupKind
from ..mq import sql as mq_sql
from ..mq.exceptions import InvalidQueueName
from ..mq.validation import check_name
from ..states import Status
from . import histogram

logger = logging.getLogger("django_pgqueue.worker")

C = TypeVar("C")


class _Written(Protocol):
    """What a delivery completion returns (``webhooks.store.Completed``): its ids."""

    written: set[int]


D = TypeVar("D", bound=_Written)

# Plain strings: compared once per outcome on the hot path.
_SUCCEEDED = str(Status.SUCCEEDED.value)
_RETRY = str(Status.FAILED.value)
_RETRIED = frozenset({_RETRY})
_FAILED = frozenset({str(Status.DEAD.value), str(Status.CANCELLED.value)})


@dataclasses.dataclass(slots=True)
class _Minute:
    ok: int = 0
    failed: int = 0
    retried: int = 0
    wait: list[int] = dataclasses.field(default_factory=lambda: [0] * histogram.SIZE)
    run: list[int] = dataclasses.field(default_factory=lambda: [0] * histogram.SIZE)


def _histogram(seconds: list[float]) -> list[int]:
    """Counts per bucket of ``seconds``: sorted once (C), then one binary search per
    bucket bound rather than one per value."""
    seconds.sort()
    edges = [bisect_right(seconds, bound) for bound in histogram.BOUNDS]
    counts = [edges[0]]
    counts.extend(b - a for a, b in itertools.pairwise(edges))
    counts.append(len(seconds) - edges[-1])
    return counts


def aggregate_jobs(
    outcomes: Sequence[Any], written: set[int] | None = None
) -> dict[tuple[str, str], _Minute]:
    """One entry per queue of the outcomes (only those in ``written`` when given):
    counts and both histograms. A released attempt (``refund``: given back unrun)
    counts nothing.

    On the completer's hot path, once per batch, so the work per outcome is done by
    comprehensions and C (``list.count``, ``bisect``, ``Counter``), not a Python
    statement per outcome and field: a fraction of a microsecond per outcome.
    """
    if written is None:
        counted = [o for o in outcomes if not o.refund]
    else:
        counted = [o for o in outcomes if not o.refund and o.id in written]
    groups: dict[str, list[Any]] = {}
    queues = {o.queue_name for o in counted}
    if len(queues) == 1:
        groups[queues.pop()] = counted  # the usual batch: one queue
    else:
        for outcome in counted:
            groups.setdefault(outcome.queue_name, []).append(outcome)
    rows: dict[tuple[str, str], _Minute] = {}
    for queue_name, group in groups.items():
        statuses = [o.status for o in group]
        rows[(RollupKind.QUEUE.value, queue_name)] = _Minute(
            ok=statuses.count(_SUCCEEDED),
            failed=sum(statuses.count(s) for s in _FAILED),
            retried=statuses.count(_RETRY),
            wait=_histogram([o.wait for o in group]),
            run=_histogram([o.duration for o in group]),
        )
    return rows


def record_params(rows: dict[tuple[str, str], _Minute]) -> dict[str, str]:
    """The parameters of the rollup's upsert (``sql.rollup_add``) for ``rows``."""
    keys = sorted(rows)  # one lock order for every completer (sql.ROLLUP_RECORD)
    return {
        "kinds": array_literal([kind for kind, _ in keys]),
        "names": text_array_literal([name for _, name in keys]),
        "oks": array_literal([str(rows[k].ok) for k in keys]),
        "faileds": array_literal([str(rows[k].failed) for k in keys]),
        "retrieds": array_literal([str(rows[k].retried) for k in keys]),
        "waits": text_array_literal([histogram.literal(rows[k].wait) for k in keys]),
        "runs": text_array_literal([histogram.literal(rows[k].run) for k in keys]),
    }


def add(conn: Any, params: dict[str, str]) -> None:
    """Add the rows of ``params`` (``record_params``) to the current minute."""
    conn.execute(sql.ROLLUP_RECORD, params)


def record(conn: Any, rows: dict[tuple[str, str], _Minute]) -> None:
    """Add ``rows`` to the current minute in one statement (nothing when empty)."""
    if rows:
        add(conn, record_params(rows))


def complete_counted_jobs(
    conn: Any,
    outcomes: Sequence[Any],
    complete: Callable[[dict[str, str] | None], set[int]],
) -> set[int]:
    """Complete a batch of job outcomes and count them into their queues' minutes.

    ``complete(counts)`` is the job store's completion: given the batch's rollup
    parameters, its one statement also adds them, if it wrote every row
    (sql/jobs.py, COMPLETE_COUNTED_JOBS), so counts and completions commit
    together. See ``complete_counted``."""
    return complete_counted(conn, outcomes, aggregate_jobs, complete, lambda written: written)


def complete_counted_deliveries(
    conn: Any, outcomes: Sequence[Any], complete: Callable[[dict[str, str] | None], D]
) -> D:
    """The same for a batch of delivery outcomes, counted per endpoint and per
    application (sql/deliveries.py, COMPLETE_COUNTED_DELIVERIES); ``complete``
    returns the store's ``Completed``."""
    if not get_settings().ROLLUP:
        return complete(None)
    applications = _applications_of(conn, {o.endpoint_id for o in outcomes if not o.refund})

    def aggregate(
        batch: Sequence[Any], written: set[int] | None = None
    ) -> dict[tuple[str, str], _Minute]:
        kept = batch if written is None else [o for o in batch if o.id in written]
        return aggregate_deliveries(kept, applications)

    return complete_counted(conn, outcomes, aggregate, complete, lambda done: done.written)


def complete_counted(
    conn: Any,
    outcomes: Sequence[Any],
    aggregate: Callable[..., dict[tuple[str, str], _Minute]],
    complete: Callable[[dict[str, str] | None], C],
    written_of: Callable[[C], set[int]],
) -> C:
    """Complete a batch with its counts in the completion's own statement.

    ``aggregate(outcomes)`` gives the batch's rows, ``aggregate(outcomes, written)``
    those of the written ids only; ``complete(counts)`` runs the store's completion
    (counting only if it wrote every row); ``written_of`` reads the written ids
    from its result. A batch with a lost lease (some ids not written) had nothing
    counted; what it did write is counted by one more statement right after (a
    crash between the two loses that batch's counts: the rollup is a chart, and
    the rare case is not worth a transaction on every batch). A refused count
    never holds up the completions it would count: the batch is written again
    uncounted, with an error in the log. With ``PGQUEUE["ROLLUP"]`` off this is
    ``complete(None)``.
    """
    if not get_settings().ROLLUP:
        return complete(None)
    rows = aggregate(outcomes)
    if not rows:  # only releases: nothing to count
        return complete(None)
    try:
        done = complete(record_params(rows))
    except Exception as exc:
        _refused(exc)
        return complete(None)
    written = written_of(done)
    if len(written) < len(outcomes):
        try:
            record(conn, aggregate(outcomes, written))
        except Exception as exc:
            _refused(exc)
    return done


def _refused(exc: Exception) -> None:
    """Re-raise a lost connection (the completer retries the batch); log anything else
    as a refused count, which never holds up the completions it would count."""
    if is_connection_error(exc):
        raise exc
    logger.error("Rollup write refused (%s); batch completed uncounted", exc)


#: Endpoint id -> its application's uid (None: a global endpoint), as last read,
#: and when the cache was filled: an endpoint's application is read once in a while,
#: not per batch.
_applications: dict[int, str | None] = {}
_applications_read = {"at": 0.0}
#: Seconds the endpoint -> application answers are trusted.
APPLICATIONS_TTL = 300.0


def _applications_of(conn: Any, endpoint_ids: set[int]) -> dict[int, str | None]:
    if time.monotonic() - _applications_read["at"] > APPLICATIONS_TTL:
        _applications.clear()
        _applications_read["at"] = time.monotonic()
    unknown = [i for i in endpoint_ids if i not in _applications]
    if unknown:
        rows = conn.execute(sql.ROLLUP_ENDPOINT_APPLICATIONS, {"ids": unknown}).fetchall()
        _applications.update(dict.fromkeys(unknown))
        _applications.update({row[0]: row[1] for row in rows})
    return _applications


def aggregate_deliveries(
    outcomes: Sequence[Any], applications: dict[int, str | None]
) -> dict[tuple[str, str], _Minute]:
    """One entry per endpoint (by id) and per application (by uid) of the written
    delivery outcomes: delivered, failed for good, retried, and the latency."""
    rows: dict[tuple[str, str], _Minute] = {}
    for outcome in outcomes:
        if outcome.refund:
            continue
        keys = [(RollupKind.ENDPOINT.value, str(outcome.endpoint_id))]
        application = applications.get(outcome.endpoint_id)
        if application is not None:
            keys.append((RollupKind.APPLICATION.value, application))
        for key in keys:
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Minute()
            if outcome.status == Status.SUCCEEDED:
                row.ok += 1
            elif outcome.status in _RETRIED:
                row.retried += 1
            elif outcome.status in _FAILED:
                row.failed += 1
            row.run[histogram.bucket(outcome.duration_ms / 1000.0)] += 1
    return rows


def sample_depth(conn: Any) -> None:
    """Write each job queue's backlog into the current minute, unless a worker did."""
    conn.execute(sql.ROLLUP_SAMPLE_DEPTH)


# -- message queues: a sampler, not a count on the hot path --------------------------
#
# A message queue's minute is read from counters PostgreSQL keeps whatever we do
# (mq/sql.py, SAMPLE_COUNTERS), so send, read, delete and archive, from Python or
# from the SQL API, run exactly the statements they ran before. What a minute keeps:
#
# * ``ok``: messages settled (left the queue: deleted, archived, popped, purged or
#   moved as dead letters), from the queue table's deleted-rows counter;
# * ``failed``: of those, archived (the archive's inserted-rows counter);
# * ``retried``: 0, as redeliveries are not known without a count on the read path;
# * ``depth``: visible messages, exact up to MQ_DEPTH_EXACT, then the estimate;
# * ``run_hist`` (a message has no timings to keep): the messages sent in the minute
#   (msg_id's sequence moved on) and the counters' marks the next minute counts
#   from, at the positions below.
#
# A count is the difference between a counter and its mark in the queue's previous
# minute. It is never negative: a counter found below its mark was started again
# (statistics reset or lost in a crash, the sequence of a queue kept out of the
# WAL, after a crash) and counts from zero. A queue whose table is not the one marked (its oid) was
# dropped and created again, and counts from zero; so does a queue created since the
# last sample. A queue with no previous minute in MQ_MAX_GAP_SECONDS (the sampler's
# first minute, or no worker ran for a while) counts nothing that minute rather than
# everything since its creation in one minute.

#: Positions in an mq minute's ``run_hist``.
MQ_SENT, MQ_SEQUENCE_MARK, MQ_DELETED_MARK, MQ_ARCHIVED_MARK, MQ_TABLE_MARK = range(5)
#: Seconds back a message queue's previous minute may be and still be the base.
MQ_MAX_GAP_SECONDS = 300.0
#: Visible messages of one queue counted exactly; beyond, PostgreSQL's estimate.
MQ_DEPTH_EXACT = 1_000


@dataclasses.dataclass(frozen=True, slots=True)
class MqCounters:
    """One message queue's counters at a sample (``mq/sql.py``, SAMPLE_COUNTERS)."""

    name: str
    table: int
    #: Messages ever sent (msg_id's sequence); None: not readable by this role.
    sequence: int | None
    deleted: int
    archived: int
    estimate: int
    created_at: dt.datetime


def _since(current: int | None, mark: int | None) -> int:
    """What a counter did since its mark: 0 without either, its whole value if it was
    started again (below its mark)."""
    if current is None or mark is None:
        return 0
    return current - mark if current >= mark else current


def mq_minute(
    counters: MqCounters, previous: Sequence[int] | None, fresh: bool
) -> tuple[int, int, int, list[int]]:
    """(sent, settled, archived, marks) of one message queue's minute, from its
    counters and its previous minute's marks (``run_hist``; None: no previous minute
    to count from). ``fresh``: the queue was created since the last sample, so its
    counters count from zero."""
    marks: list[int | None]
    if previous is not None and len(previous) == 5 and previous[MQ_TABLE_MARK] == counters.table:
        marks = list(previous)
    elif fresh or (previous is not None and len(previous) == 5):
        marks = [0, 0, 0, 0, counters.table]  # a new table: its counters began at zero
    else:
        marks = [None] * 5  # nothing to count from: this minute only sets the marks
    settled = _since(counters.deleted, marks[MQ_DELETED_MARK])
    archived = min(_since(counters.archived, marks[MQ_ARCHIVED_MARK]), settled)
    sent = _since(counters.sequence, marks[MQ_SEQUENCE_MARK])
    sequence = counters.sequence
    if sequence is None:  # unreadable now: keep the old mark, count nothing
        sequence = previous[MQ_SEQUENCE_MARK] if previous and len(previous) == 5 else 0
    return (
        sent,
        settled,
        archived,
        [sent, sequence, counters.deleted, counters.archived, counters.table],
    )


#: Queues whose visible messages one statement counts (``UNION ALL`` of their counts).
MQ_DEPTH_CHUNK = 100


def _estimated(counters: MqCounters, visible: int) -> int:
    """A bounded count, or at the bound PostgreSQL's estimate of the queue's rows."""
    return max(int(visible), int(counters.estimate)) if visible >= MQ_DEPTH_EXACT else int(visible)


def _mq_depth(conn: Any, counters: MqCounters) -> int | None:
    """Visible messages of one queue (None: its table is gone since the counters)."""
    try:
        check_name(counters.name)
        (visible,) = conn.execute(
            mq_sql.statement("depth", counters.name), [MQ_DEPTH_EXACT]
        ).fetchone()
    except InvalidQueueName:
        return None
    except psycopg.errors.UndefinedTable:
        return None  # dropped between the counters and this count
    return _estimated(counters, visible)


def _mq_depths(conn: Any, queues: Sequence[MqCounters]) -> dict[str, int]:
    """Visible messages of each queue still there: one statement per MQ_DEPTH_CHUNK
    queues (a round trip per queue would cost more than most counts), and one per
    queue for a chunk in which a table is gone."""
    valid = []
    for queue in queues:
        try:
            check_name(queue.name)
        except InvalidQueueName:
            logger.warning("Message queue sample: registry name %r skipped", queue.name)
            continue
        valid.append(queue)
    depths: dict[str, int] = {}
    for start in range(0, len(valid), MQ_DEPTH_CHUNK):
        chunk = valid[start : start + MQ_DEPTH_CHUNK]
        text = "\nUNION ALL\n".join(
            f"SELECT {n} AS n, ({mq_sql.statement('depth', q.name)})" for n, q in enumerate(chunk)
        )
        try:
            rows = conn.execute(text, [MQ_DEPTH_EXACT] * len(chunk)).fetchall()
        except psycopg.errors.UndefinedTable:
            for queue in chunk:
                depth = _mq_depth(conn, queue)
                if depth is not None:
                    depths[queue.name] = depth
            continue
        for n, visible in rows:
            depths[chunk[n].name] = _estimated(chunk[n], visible)
    return depths


def sample_message_queues(conn: Any, minute: dt.datetime | None = None) -> int:
    """Write every message queue's minute (``minute``, default the database clock's
    current one) unless a worker did; return how many rows were written.

    Run by every worker's maintenance thread; the first in a minute does the work,
    the others' tries stop at an index probe. Costs one statement for the counters
    of every queue, one statement of bounded counts per MQ_DEPTH_CHUNK queues, one
    read of the previous minutes and one write (``docs/performance.md`` has the
    figures). ``conn`` is autocommit, so a queue dropped halfway is left out without
    failing the others. A minute holds what the counters did since the previous
    sample, which the maintenance threads' cadence puts about a minute earlier.
    """
    row = conn.execute(sql.ROLLUP_MQ_SAMPLED, {"minute": minute}).fetchone()
    minute, sampled = row[0], row[1]
    if sampled:
        return 0
    counters = [MqCounters(*r) for r in conn.execute(mq_sql.SAMPLE_COUNTERS).fetchall()]
    if not counters:
        return 0
    previous: dict[str, tuple[dt.datetime, list[int]]] = {
        name: (at, list(marks or []))
        for name, at, marks in conn.execute(
            sql.ROLLUP_MQ_PREVIOUS, {"minute": minute, "gap": MQ_MAX_GAP_SECONDS}
        ).fetchall()
    }
    # Created since the last sample: after the start of the last sampled minute (or,
    # with none within the gap, of the minute before this one).
    last = max((at for at, _ in previous.values()), default=minute - dt.timedelta(minutes=1))
    names, settled, archived, marks, depths = [], [], [], [], []
    depths_of = _mq_depths(conn, counters)
    for queue in counters:
        depth = depths_of.get(queue.name)
        if depth is None:
            continue
        before = previous.get(queue.name)
        fresh = queue.created_at >= last
        _sent, done, kept, now_marks = mq_minute(queue, before[1] if before else None, fresh)
        names.append(queue.name)
        settled.append(done)
        archived.append(kept)
        marks.append(histogram.literal(now_marks))
        depths.append(depth)
    if not names:
        return 0
    return int(
        conn.execute(
            sql.ROLLUP_MQ_WRITE,
            {
                "minute": minute,
                "names": names,
                "settled": settled,
                "archived": archived,
                "marks": marks,
                "depths": depths,
            },
        ).rowcount
    )


@dataclasses.dataclass(frozen=True, slots=True)
class RollupMinute:
    """One stored minute of one name, as the charts read it."""

    name: str
    minute: dt.datetime
    ok: int
    failed: int
    retried: int
    wait_hist: list[int]
    run_hist: list[int]
    depth: int | None


def read(kind: str, seconds: float, names: Sequence[str] | None = None) -> list[RollupMinute]:
    """The minutes of ``kind`` in the last ``seconds``, by name then minute."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(
            sql.ROLLUP_READ,
            {"kind": kind, "since": float(seconds), "names": list(names) if names else None},
        )
        return [RollupMinute(*row) for row in cursor.fetchall()]


def prune(conn: Any, age: float) -> int:
    """Delete the minutes older than ``age`` seconds; return how many went."""
    return int(conn.execute(sql.ROLLUP_PRUNE, {"age": float(age)}).rowcount)

"""FIFO group reads (pgmq's ``read_grouped``, ``read_grouped_rr``, ``read_grouped_head``)
and the FIFO index that serves them.

A message's group is its ``x-pgmq-group`` header; messages without one share a
default group. Within a group messages are handed out in ``msg_id`` order, and never
while an older one of the group is still in flight, so one group is processed in
order while different groups are processed in parallel. The statements and why they
are shaped so are in ``sql.py`` ("FIFO groups"); the SQL API runs the same ones.
"""

from __future__ import annotations

from . import sql
from .exceptions import QueueError
from .store import Message, _cursor, _decoded, _executor, get_queue, list_queues
from .validation import MAX_QTY, MAX_VT_SECONDS, check_count, check_seconds

#: The header that names a message's group (pgmq's).
GROUP_HEADER = "x-pgmq-group"

KINDS = ("read_grouped", "read_grouped_rr", "read_grouped_head")


def _read(kind: str, name: str, vt: float, qty: int) -> list[Message]:
    vt = check_seconds("vt", vt, MAX_VT_SECONDS)
    qty = check_count("qty", qty, MAX_QTY)
    info = get_queue(name)
    if info.max_reads is not None:
        # A head that fails for ever would hold its group back for ever; the read that
        # would dead-letter it is not written for groups yet, so refuse rather than
        # ignore the queue's policy.
        raise QueueError(
            f"{kind} is not offered on queue {name!r}: it has max_reads "
            "(dead letters by read count); read it with read() or use a queue without max_reads"
        )
    with _cursor(name) as cursor:
        # The second qty bounds the messages looked at per group: one for the heads.
        per_group = 1 if kind == "read_grouped_head" else qty
        cursor.execute(sql.statement(kind, name), [qty, per_group, qty, vt])
        rows = cursor.fetchall()
    return _decoded(rows, info, _executor(name), keep_order=True)


def read_grouped(name: str, vt: float = 30, qty: int = 1) -> list[Message]:
    """Read up to ``qty`` messages, filling the batch from the group with the oldest
    visible head first, then the next (SQS FIFO style): throughput for related
    messages. Order within each group is kept; a group with a message in flight is
    skipped."""
    return _read("read_grouped", name, vt, qty)


def read_grouped_rr(name: str, vt: float = 30, qty: int = 1) -> list[Message]:
    """Read up to ``qty`` messages round-robin across groups: the head of every eligible
    group (oldest first), then the second of each, and so on (fairness between
    groups). Order within each group is kept."""
    return _read("read_grouped_rr", name, vt, qty)


def read_grouped_head(name: str, vt: float = 30, qty: int = 1) -> list[Message]:
    """Read the head of up to ``qty`` different groups, one message per group."""
    return _read("read_grouped_head", name, vt, qty)


def create_fifo_index(name: str) -> None:
    """Create the index the grouped reads use on queue ``name`` (idempotent).

    A btree on the group key and ``msg_id`` (pgmq makes a GIN index on the headers;
    this one serves the lookups our statements make). Building it blocks the queue's
    writes for as long as it takes, as any ``CREATE INDEX``.
    """
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("create_fifo_index", name))


def create_fifo_indexes_all() -> None:
    """``create_fifo_index`` on every queue."""
    for info in list_queues():
        create_fifo_index(info.name)

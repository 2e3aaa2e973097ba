"""Where a worker's claims start reading their indexes under a held-back xmin
horizon: the scan floor.

A claim reads an index from its head. Every row it took leaves dead versions
there (its entries before the claim changed it), and vacuum removes them only once
no snapshot can see them. A session holding the horizon back (idle in
transaction, a long report, a standby's feedback) lets them pile up at the head,
where every claim fetches each one to find it dead. A floored claim reads only
rows that became due recently, above them; a full claim, read from the head, runs
often enough that nothing waits long below the floor. One :class:`ScanFloor` per
claim loop keeps the state, per statement:

* the jobs' plain claims and the end of lapsed workflow steps (``sql/jobs.py``,
  "The scan floor", applied by ``jobs/store.py``);
* each message queue's consumer reads (``mq/sql.py``, ``_FLOOR``, applied by
  ``mq/store.py``'s ``claim``).
"""

from __future__ import annotations


class ScanFloor:
    """Where the worker's claims start reading their indexes: one per claim loop,
    passed to every source's claim as ``params["scan_floor"]``. Each statement it
    floors has its own state, by key: the jobs' plain and atomic claims and
    ``END_LAPSED_STEPS`` (jobs/store.py), and the reads of each message queue
    (``"mq:<queue>"``, mq/store.py). Without one a claim reads the whole index
    (tests, ``run_tasks``, the benchmarks, ``mq.read``).

    A *full* claim (no floor) runs every ``FULL_EVERY`` seconds, or less often when
    full claims are slow (a held-back horizon): at most ``FULL_SHARE`` of the claim
    loop's time, and at least every ``FULL_EVERY_MAX`` seconds. Between them a claim
    reads only rows due (and leases lapsed) after the start of the last full claim
    that came back short (it took every due row it could see, so every row due
    before it was taken, is held by another claim, or was not committed yet), less
    ``MARGIN``. While full claims are spaced out, a floored claim that comes back
    short raises the floor to ``TRAIL`` below its own start: it took every due row it
    could see above its floor, as a short full claim did below it. A full claim that
    fills its limit finds a backlog that may lie below
    the floor (a large ``enqueue_many`` committed by a long transaction, say): every
    claim is then full, as without a floor, until one comes back short. Times are
    this process's monotonic clock, turned into an age that the database subtracts
    from its own ``now()``: no two clocks are compared.
    """

    #: Seconds between two full claims: the longest a row below the floor waits
    #: (a job written by a transaction older than MARGIN, a row put back with an
    #: old due time) while vacuum keeps up. The poll interval's default, which such
    #: a row waited for without NOTIFY.
    FULL_EVERY = 1.0
    #: The share of the claim loop's time each statement's full claims may take:
    #: a full claim taking 1 ms or more spaces the next out (20 ms: 20 s later), so
    #: that claims behind a slow full claim stay rare. Three statements have a
    #: floor (the plain claim, the atomic one, END_LAPSED_STEPS): at 0.005 each,
    #: the claim loop spent 1.5 % of a held horizon's time in full claims, and a
    #: job woken meanwhile waited for them: the pinned p99.
    FULL_SHARE = 0.001
    #: The longest wait between two full claims, however slow they are.
    FULL_EVERY_MAX = 30.0
    #: Seconds below the last short full claim's start where the floor sits: a job
    #: whose transaction began less than this before that claim is still above it.
    MARGIN = 1.0
    #: Seconds below a short floored claim's start where it may raise the floor (less
    #: MARGIN): only when full claims are further apart than that (slow: a held
    #: horizon), so floored claims then read a few seconds of dead entries, not all
    #: those since the last full claim. A job whose transaction began more than
    #: TRAIL + MARGIN before it committed is below it, and waits for the next full
    #: claim, as one older than MARGIN does for a full claim's own floor.
    TRAIL = 4.0

    def __init__(self) -> None:
        self._next_full_at: dict[str, float] = {}
        #: When the last full claim began, if it came back short (else absent), or
        #: TRAIL before the last short floored claim began, if that is later.
        self._caught_up_at: dict[str, float] = {}

    def age(self, statement: str, now: float) -> float | None:
        """The ``%(floor)s`` for the next run of ``statement``: None for a full claim."""
        caught_up = self._caught_up_at.get(statement)
        if caught_up is None or now >= self._next_full_at.get(statement, now):
            return None
        return now - caught_up + self.MARGIN

    def forget(self, statement: str) -> None:
        """Drop ``statement``'s state: its next run is a full claim (a dropped queue)."""
        self._next_full_at.pop(statement, None)
        self._caught_up_at.pop(statement, None)

    def record(
        self, statement: str, started: float, ended: float, floor: float | None, short: bool
    ) -> None:
        """Note a run of ``statement`` from ``started`` to ``ended`` with ``floor``;
        ``short`` when it returned fewer rows than its limit."""
        if floor is not None:
            caught_up = self._caught_up_at.get(statement)
            if short and caught_up is not None and started - self.TRAIL > caught_up:
                self._caught_up_at[statement] = started - self.TRAIL
            return
        spacing = min(self.FULL_EVERY_MAX, (ended - started) / self.FULL_SHARE)
        self._next_full_at[statement] = started + max(self.FULL_EVERY, spacing)
        if short:
            self._caught_up_at[statement] = started
        else:
            self._caught_up_at.pop(statement, None)  # a backlog: full claims until short

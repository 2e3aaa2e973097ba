"""Statements of workflows and batches (docs/workflows.md): the release a completion
runs, the workflow and edge rows, the operators' cancel and retry.

A step is a job. A step with parents is born ``waiting``: in neither due index, so
the claim never reads it. Its ``pending_parents`` counts the parents that have not
ended. The statement that ends a parent (the worker's fenced completion, an atomic
job's commit) also runs RELEASE: it marks the parent's edges ``counted`` and takes
them off the children's counters, in that one statement. So a step is released
exactly when its last parent's end is written, by that write, and never twice:

* an edge is counted once (``NOT e.counted`` under the edge's row lock), whoever
  ends the parent and however often (a replayed step that succeeds again counts
  nothing);
* a child changes only while ``waiting`` (re-checked under its row lock when two
  parents end at once: READ COMMITTED re-reads the locked row, so the second
  decrement starts from the first one's counter);
* nothing is written unless the completion itself was (the fencing guard of the
  parent's UPDATE): a worker that lost its lease releases nothing.
"""

from __future__ import annotations

from .fragments import EDGE_TABLE, JOB_TABLE, TERMINAL_SQL, WAITING_SQL, WORKFLOW_TABLE

#: What the release writes on a step it cancels because a parent failed; replay
#: (RESTORE_CHILDREN) brings back the steps that carry it.
PARENT_FAILED_ERROR = "Cancelled: a parent failed"


def release(done_sql: str) -> str:
    """The CTEs that release the children of the rows ``done_sql`` (a CTE of the
    statement returning ``id, status, workflow_id`` of each row it ended), and a
    last one, ``woken``, that sends one NOTIFY (``%(channel)s``) when a step became
    due. The statement must start with ``WITH RECURSIVE`` and read ``woken``.

    * ``ended``: the workflow steps among them that reached a terminal state. For a
      plain job ``workflow_id`` is NULL, the set is empty, and every CTE below reads
      nothing (no edge lookup, no job row): a plain job pays only this filter.
    * ``doomed``: the waiting descendants a failure cancels: children of a failed
      step whose policy is ``cancel``, and theirs, transitively (a recursive read of
      the edges; only when a step failed).
    * ``counted``: the edges of ``ended`` and ``doomed`` not counted yet, now marked.
    * ``released``: each waiting child takes its counted edges off
      ``pending_parents`` (adding the failed ones to ``failed_parents``) and, at
      zero, becomes ``pending`` and due now; a ``cancel`` step with a failed parent
      and an ``if_failed`` step without one are cancelled. The children are
      visited in id order so that two completions lock shared children in one order.

    The ended parents and the counted children are folded into arrays
    (``parents``, ``tally``) and joined back through ``unnest``, as the claim does
    (fragments.py, "The claim's skeleton"): the planner estimates an unnest at 100
    rows and keeps each join an index lookup per row. Joined as CTEs, their
    estimates (hundreds of rows) made it hash a sequential scan of the job table,
    or merge-join the whole edge index, in every release. For a plain job the
    arrays are NULL and ``unnest`` yields nothing.
    """
    cancelled_sql = """(c.step_policy = 'cancel' AND c.failed_parents + n.failed > 0)
              OR (c.pending_parents = n.ended AND c.step_policy = 'if_failed'
                  AND c.failed_parents + n.failed = 0)"""
    return f"""ended AS (
    SELECT d.id, d.status = 'succeeded' AS ok FROM {done_sql} AS d
    WHERE d.workflow_id IS NOT NULL AND d.status IN {TERMINAL_SQL}
), doomed(id) AS (
    SELECT e.child_id
    FROM ended JOIN {EDGE_TABLE} AS e ON e.parent_id = ended.id
    JOIN {JOB_TABLE} AS c ON c.id = e.child_id
    WHERE NOT ended.ok AND c.status IN {WAITING_SQL} AND c.step_policy = 'cancel'
  UNION
    SELECT e.child_id
    FROM doomed JOIN {EDGE_TABLE} AS e ON e.parent_id = doomed.id
    JOIN {JOB_TABLE} AS c ON c.id = e.child_id
    WHERE c.status IN {WAITING_SQL} AND c.step_policy = 'cancel'
), parents AS (
    SELECT pg_catalog.array_agg(id) AS ids, pg_catalog.array_agg(ok) AS oks
    FROM (SELECT id, ok FROM ended UNION ALL SELECT id, false FROM doomed) AS all_ended
), counted AS (
    UPDATE {EDGE_TABLE} AS e SET counted = true
    FROM parents, unnest(parents.ids, parents.oks) AS p(id, ok)
    WHERE e.parent_id = p.id AND NOT e.counted
    RETURNING e.child_id, p.ok
), tally AS (
    SELECT pg_catalog.array_agg(child_id ORDER BY child_id) AS ids,
           pg_catalog.array_agg(ended ORDER BY child_id) AS ended,
           pg_catalog.array_agg(failed ORDER BY child_id) AS failed
    FROM (SELECT child_id, pg_catalog.count(*) AS ended,
                 pg_catalog.count(*) FILTER (WHERE NOT ok) AS failed
          FROM counted GROUP BY child_id) AS per_child
), released AS (
    UPDATE {JOB_TABLE} AS c SET
        pending_parents = c.pending_parents - n.ended,
        failed_parents = c.failed_parents + n.failed,
        status = CASE WHEN {cancelled_sql} THEN 'cancelled'
                      WHEN c.pending_parents > n.ended THEN c.status
                      ELSE 'pending' END,
        finished_at = CASE WHEN {cancelled_sql} THEN now() END,
        last_error = CASE WHEN {cancelled_sql}
                          THEN CASE WHEN c.step_policy = 'if_failed'
                                    THEN 'Cancelled: no parent failed'
                                    ELSE '{PARENT_FAILED_ERROR}' END
                          ELSE c.last_error END,
        next_attempt_at = now(),
        updated_at = now()
    FROM tally, unnest(tally.ids, tally.ended, tally.failed) AS n(child_id, ended, failed)
    WHERE c.id = n.child_id AND c.status IN {WAITING_SQL}
    RETURNING c.id, c.status
), woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s, '')
    FROM (SELECT 1 FROM released WHERE status = 'pending' LIMIT 1) AS any_due
)"""


# A new workflow (or batch), in the caller's transaction (Django cursor).
INSERT_WORKFLOW = f"""/* pgqueue:insert_workflow */
INSERT INTO {WORKFLOW_TABLE} (name, kind, step_count, created_at)
VALUES (%s, %s, %s, now())
RETURNING id
"""

# Every edge of a new workflow in one statement: parallel arrays of job ids.
INSERT_EDGES = f"""/* pgqueue:insert_edges */
INSERT INTO {EDGE_TABLE} (workflow_id, parent_id, child_id, counted)
SELECT %s, p, c, false FROM unnest(%s::bigint[], %s::bigint[]) AS t(p, c)
"""

# The workflow's row, for its page and ``get_workflow``.
GET_WORKFLOW = f"""/* pgqueue:get_workflow */
SELECT id, name, kind, step_count, created_at, cancelled_at
FROM {WORKFLOW_TABLE} WHERE id = %s
"""

# A workflow's steps, through the partial index of steps (``pgq_job_step_idx``).
# Only what the graph and the status need: the results are read per step through
# the job store's ``read`` (they may live elsewhere once a job has finished).
WORKFLOW_STEPS = f"""/* pgqueue:workflow_steps */
SELECT id, step_name, task_path, status, step_policy, pending_parents
FROM {JOB_TABLE} WHERE workflow_id = %s ORDER BY id
"""

# A workflow's edges (its graph).
WORKFLOW_EDGES = f"""/* pgqueue:workflow_edges */
SELECT parent_id, child_id FROM {EDGE_TABLE} WHERE workflow_id = %s ORDER BY parent_id, child_id
"""

# A step's parents, in the order they were given (edge ids are drawn in that order).
STEP_PARENTS = f"""/* pgqueue:step_parents */
SELECT parent_id FROM {EDGE_TABLE} WHERE child_id = %s ORDER BY id
"""

# Mark a workflow cancelled (its steps are the job store's: CANCEL_WORKFLOW_STEPS).
MARK_WORKFLOW_CANCELLED = f"""/* pgqueue:mark_workflow_cancelled */
UPDATE {WORKFLOW_TABLE} SET cancelled_at = COALESCE(cancelled_at, now()) WHERE id = %s
RETURNING id
"""

# Cancel every step of a workflow that has not started: waiting, pending or failed
# rows become cancelled; a running one is flagged for its worker (as ``abort``),
# which then records its attempt as cancelled. The rows are locked in id order
# first, so a completion releasing one of them either ran before (and its release
# is cancelled here) or waits and then finds no waiting child. A step running now
# may still succeed; its children are cancelled already, so nothing starts after.
CANCEL_WORKFLOW_STEPS = f"""/* pgqueue:cancel_workflow_steps */
WITH steps AS MATERIALIZED (
    SELECT id, status FROM {JOB_TABLE}
    WHERE workflow_id = %(workflow_id)s AND status NOT IN {TERMINAL_SQL}
    ORDER BY id
    FOR UPDATE
)
UPDATE {JOB_TABLE} AS j SET
    status = CASE WHEN s.status = 'in_progress' THEN s.status ELSE 'cancelled' END,
    finished_at = CASE WHEN s.status = 'in_progress' THEN j.finished_at ELSE now() END,
    abort_requested_at = CASE WHEN s.status = 'in_progress' THEN now()
                              ELSE j.abort_requested_at END,
    last_error = CASE WHEN s.status = 'in_progress' THEN j.last_error
                      ELSE 'Cancelled with its workflow' END,
    updated_at = now()
FROM steps AS s WHERE j.id = s.id
RETURNING j.id, s.status
"""

# Replay of steps whose failure (dead, cancelled) settled their children: one level
# of the children back, for the operator's replay (operations.py), which runs it
# again with the steps it brought back until none comes back. Each edge of the
# given steps that their failure counted is counted no longer (``settled``), so
# the steps' next end releases it. Only children the failure settled and nothing
# else has changed since are touched: ``waiting`` ones (they wait for more
# parents) and those the release cancelled (PARENT_FAILED_ERROR); a child that was
# released and ran, or that an operator ended, keeps its outcome and its edge.
# Each touched child's counters are counted again from its edges, not adjusted:
# a child cancelled already does not count a later parent's end, so its counters
# say less than its edges. ``pending_parents``: its edges not counted, these
# included; ``failed_parents``: its other counted edges whose parent did not
# succeed (a parent no longer in this table, moved to the history, counts as
# succeeded). A cancelled child with no failed parent left goes back to
# ``waiting``; its id comes back, as its own children were cancelled with it.
RESTORE_CHILDREN = f"""/* pgqueue:restore_children */
WITH settled AS MATERIALIZED (
    SELECT e.id AS edge_id, e.child_id
    FROM unnest(%(ids)s::bigint[]) AS p(id)
    JOIN {EDGE_TABLE} AS e ON e.parent_id = p.id
    JOIN {JOB_TABLE} AS c ON c.id = e.child_id
    WHERE e.counted AND (c.status IN {WAITING_SQL}
                         OR (c.status = 'cancelled' AND c.last_error = %(cancelled_error)s))
    ORDER BY e.child_id
    FOR UPDATE OF e, c
), uncounted AS (
    UPDATE {EDGE_TABLE} AS e SET counted = false
    FROM settled WHERE e.id = settled.edge_id
    RETURNING e.child_id
), recounted AS (
    SELECT k.child_id,
           (SELECT pg_catalog.count(*) FROM {EDGE_TABLE} AS e
            WHERE e.child_id = k.child_id
              AND (NOT e.counted OR e.id IN (SELECT edge_id FROM settled))) AS pending,
           (SELECT pg_catalog.count(*) FROM {EDGE_TABLE} AS e
            JOIN {JOB_TABLE} AS p ON p.id = e.parent_id
            WHERE e.child_id = k.child_id AND e.counted AND p.status <> 'succeeded'
              AND e.id NOT IN (SELECT edge_id FROM settled)) AS failed
    FROM (SELECT DISTINCT child_id FROM settled) AS k
)
UPDATE {JOB_TABLE} AS c SET
    pending_parents = r.pending,
    failed_parents = r.failed,
    status = CASE WHEN c.status = 'cancelled' AND r.failed > 0 THEN c.status ELSE 'waiting' END,
    finished_at = CASE WHEN c.status = 'cancelled' AND r.failed > 0 THEN c.finished_at END,
    last_error = CASE WHEN c.status = 'cancelled' AND r.failed > 0 THEN c.last_error ELSE '' END,
    updated_at = now()
FROM recounted AS r WHERE c.id = r.child_id AND (SELECT pg_catalog.count(*) FROM uncounted) >= 0
RETURNING c.id, c.status
"""


# Retention (``pgqueue_prune``, through the workflow store): a batch of workflows
# older than ``age`` seconds none of whose steps is left in the job table (each
# was pruned, or moved to the history), oldest first, with their edges, in one
# statement. Shaped as PRUNE_EVENTS: a workflow is kept while a step of it
# remains (``pgq_job_step_idx`` answers that), so a step in the DLQ keeps its
# graph for its replay. ``expired`` is materialized and locked with SKIP LOCKED,
# as the claims' sources are, so two prunes take disjoint batches. The edge table
# has no index by workflow: a batch's edges are found by one scan of it, hashed
# against the batch (a batch of ``limit`` workflows per scan).
def _expired_workflows(lock_sql: str) -> str:
    """The ``expired`` CTE of the workflow retention, its rows locked by ``lock_sql``."""
    return f"""expired AS MATERIALIZED (
    SELECT f.id FROM {WORKFLOW_TABLE} AS f
    WHERE f.created_at < now() - pg_catalog.make_interval(secs => %(age)s)
      AND NOT EXISTS (SELECT 1 FROM {JOB_TABLE} AS j WHERE j.workflow_id = f.id)
    ORDER BY f.id
    LIMIT %(limit)s{lock_sql}
)"""


_EXPIRED_WORKFLOWS_SQL = _expired_workflows("\n    FOR UPDATE OF f SKIP LOCKED")
_COUNTED_WORKFLOWS_SQL = _expired_workflows("")
PRUNE_WORKFLOWS = f"""/* pgqueue:prune_workflows */
WITH {_EXPIRED_WORKFLOWS_SQL}, gone AS (
    DELETE FROM {WORKFLOW_TABLE} AS w USING expired WHERE w.id = expired.id
    RETURNING w.id
), edges AS (
    DELETE FROM {EDGE_TABLE} AS e USING gone WHERE e.workflow_id = gone.id
    RETURNING e.id
)
SELECT (SELECT pg_catalog.count(*) FROM gone), (SELECT pg_catalog.count(*) FROM edges)
"""

# What PRUNE_WORKFLOWS would delete (``--dry-run``): every such workflow, and its edges.
PRUNE_COUNT_WORKFLOWS = f"""/* pgqueue:prune_count_workflows */
WITH {_COUNTED_WORKFLOWS_SQL}
SELECT (SELECT pg_catalog.count(*) FROM expired),
       (SELECT pg_catalog.count(*) FROM {EDGE_TABLE} AS e
        WHERE e.workflow_id IN (SELECT id FROM expired))
"""

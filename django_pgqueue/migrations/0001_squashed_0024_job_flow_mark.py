"""The app's schema, built in its final form.

One ``CreateModel`` per model, with its final columns (in the order the replaced
migrations left them: the history table is ``LIKE pgqueue_job`` and a replay copies
rows between the two by position), indexes and constraints; then what models
cannot declare, each in its last version:

* the queue tables' autovacuum settings and the trigger that parks a disabled
  endpoint's deliveries, declared in ``models/database_objects.py``;
* the topic bindings' routing rule (a stored generated column) and their foreign key
  to the registry, with ON DELETE CASCADE;
* the partitioned job history.

It replaces ``0001_initial`` ... ``0024_job_flow_mark``: a database that applied
those is recognised and this runs nothing there (``tests/test_squashed_migration.py``
compares the ``pg_dump --schema-only`` of both and checks that). Their data steps (the
operator permissions carried over, disabled endpoints' deliveries parked, a column
added to existing message queues, run-time queue rows stamped, waiting jobs of limited
queues marked as flow-controlled) have nothing to change
in a fresh database and are not repeated. Permissions, as for any app, are created by
``migrate``'s post_migrate step.
"""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.comparison
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

import django_pgqueue.models.fields
from django_pgqueue.models.database_objects import PARKING_TRIGGER, QUEUE_AUTOVACUUM

# The routing rule of topic bindings, computed by PostgreSQL from the pattern (as in
# pgmq): ``.`` escaped, ``*`` one segment (``[^.]+``), ``#`` any run of characters
# (``.*``), anchored at both ends. Patterns are validated before they are bound
# (``mq.validation.TOPIC_PATTERN_RULES``: only letters, digits, ``.``, ``_``, ``-``,
# ``*`` and ``#``), so no other character needs escaping; both doors route with
# ``mq.sql`` "route" over this column. The foreign key is the database's, with ON
# DELETE CASCADE: ``mq.drop`` and the SQL API's ``drop_queue`` delete the registry row
# by SQL, and the bindings go with it.
TOPIC_ROUTING = """
ALTER TABLE pgqueue_mq_topic_binding ADD COLUMN compiled_regex text GENERATED ALWAYS AS (
    '^' || pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
        pattern, '.', '\\.'), '*', '[^.]+'), '#', '.*') || '$'
) STORED;
ALTER TABLE pgqueue_mq_topic_binding ADD CONSTRAINT pgqueue_mq_topic_queue_fk
    FOREIGN KEY (queue_name) REFERENCES pgqueue_mq_queue (name) ON DELETE CASCADE;
"""

TOPIC_ROUTING_UNDO = """
ALTER TABLE pgqueue_mq_topic_binding DROP CONSTRAINT pgqueue_mq_topic_queue_fk;
ALTER TABLE pgqueue_mq_topic_binding DROP COLUMN compiled_regex;
"""

# Finished jobs leave pgqueue_job for this table (``history.py``, docs/operations.md,
# "History and retention"). It has the live table's columns in the same order (so rows
# move between the two by position), without its identity, and a finish time on every
# row. Partitioned by state (LIST), so each state's retention drops its own partitions,
# then by day of ``finished_at`` (RANGE), the days created ahead by maintenance. There
# is deliberately no DEFAULT partition: see the same page.
CREATE_HISTORY = """
CREATE TABLE pgqueue_job_history (LIKE pgqueue_job INCLUDING DEFAULTS)
    PARTITION BY LIST (status);
ALTER TABLE pgqueue_job_history ALTER COLUMN finished_at SET NOT NULL;
ALTER TABLE pgqueue_job_history ADD PRIMARY KEY (id, status, finished_at);
CREATE TABLE pgqueue_job_history_succeeded PARTITION OF pgqueue_job_history
    FOR VALUES IN ('succeeded') PARTITION BY RANGE (finished_at);
CREATE TABLE pgqueue_job_history_dead PARTITION OF pgqueue_job_history
    FOR VALUES IN ('dead') PARTITION BY RANGE (finished_at);
CREATE TABLE pgqueue_job_history_cancelled PARTITION OF pgqueue_job_history
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
"""

# Its partitions, the days' ones included, go with it.
DROP_HISTORY = "DROP TABLE pgqueue_job_history"


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("django_pgqueue", "0001_initial"),
        ("django_pgqueue", "0002_webhooks"),
        ("django_pgqueue", "0003_queue_autovacuum"),
        ("django_pgqueue", "0004_park_disabled_endpoint_deliveries"),
        ("django_pgqueue", "0005_job_abort_requested_at"),
        ("django_pgqueue", "0006_periodic_unique_atomic"),
        ("django_pgqueue", "0007_flow_control"),
        ("django_pgqueue", "0008_heartbeat_trace_context"),
        ("django_pgqueue", "0009_message_queues"),
        ("django_pgqueue", "0010_applications"),
        ("django_pgqueue", "0011_operator_permissions"),
        ("django_pgqueue", "0012_delivery_drop_unused_fields"),
        ("django_pgqueue", "0013_api_keys"),
        ("django_pgqueue", "0014_event_ordering_key_secrets_scope"),
        ("django_pgqueue", "0015_mq_last_read_at"),
        ("django_pgqueue", "0016_schedule_run_now"),
        ("django_pgqueue", "0017_queues"),
        ("django_pgqueue", "0018_mq_topics"),
        ("django_pgqueue", "0019_attempt_request_headers"),
        ("django_pgqueue", "0020_console_rollup_progress"),
        ("django_pgqueue", "0021_workflows"),
        ("django_pgqueue", "0022_job_history"),
        ("django_pgqueue", "0023_queue_key_rate"),
        ("django_pgqueue", "0024_job_flow_mark"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("in_progress", "In progress"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed, retry scheduled"),
                            ("dead", "Dead (DLQ)"),
                            ("cancelled", "Cancelled"),
                            ("waiting", "Waiting for its parents"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("priority", models.SmallIntegerField(default=0, help_text="Higher runs first.")),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0, help_text="Claims so far; counted when a worker claims the row."
                    ),
                ),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Earliest time the row may be claimed (run_after, or the retry time).",
                    ),
                ),
                (
                    "locked_by",
                    models.UUIDField(
                        blank=True,
                        editable=False,
                        help_text="Fencing token of the most recent claim.",
                        null=True,
                    ),
                ),
                (
                    "locked_until",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Lease expiry (database clock).",
                        null=True,
                    ),
                ),
                (
                    "worker_id",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Worker of the most recent claim.",
                        max_length=128,
                    ),
                ),
                ("last_error", models.TextField(blank=True, default="")),
                (
                    "errors",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="One entry per failed attempt, oldest first.",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("started_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("finished_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "task_path",
                    models.CharField(help_text="Import path of the Task object.", max_length=255),
                ),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("backend", models.CharField(default="default", max_length=100)),
                ("args", models.JSONField(blank=True, default=list)),
                ("kwargs", models.JSONField(blank=True, default=dict)),
                ("result", models.JSONField(blank=True, null=True)),
                (
                    "worker_ids",
                    models.JSONField(
                        blank=True, default=list, help_text="Worker of each attempt, in order."
                    ),
                ),
                (
                    "abort_requested_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When an operator asked to abort the running attempt; its worker then records it as cancelled.",
                        null=True,
                    ),
                ),
                (
                    "atomic",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Claimed, run and completed in one transaction (atomic tasks).",
                    ),
                ),
                (
                    "unique_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="At most one live job per task and key (unique tasks).",
                        max_length=255,
                        null=True,
                    ),
                ),
                ("trace_context", models.JSONField(blank=True, editable=False, null=True)),
                (
                    "concurrency_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="The key this job's queue limits per key (queues.configure(key_concurrency=)).",
                        max_length=200,
                        null=True,
                    ),
                ),
                (
                    "progress",
                    models.FloatField(
                        blank=True,
                        db_default=None,
                        editable=False,
                        help_text="How far the task says it is, from 0 to 1.",
                        null=True,
                    ),
                ),
                (
                    "progress_at",
                    models.DateTimeField(blank=True, db_default=None, editable=False, null=True),
                ),
                (
                    "progress_message",
                    models.TextField(blank=True, db_default=None, editable=False, null=True),
                ),
                (
                    "failed_parents",
                    models.PositiveIntegerField(
                        blank=True,
                        editable=False,
                        help_text="Parents that ended without success.",
                        null=True,
                    ),
                ),
                (
                    "pending_parents",
                    models.PositiveIntegerField(
                        blank=True,
                        editable=False,
                        help_text="Parents that have not ended yet.",
                        null=True,
                    ),
                ),
                (
                    "step_name",
                    models.CharField(blank=True, editable=False, max_length=200, null=True),
                ),
                (
                    "step_policy",
                    models.CharField(
                        blank=True,
                        editable=False,
                        help_text="What a parent's failure does to this step: cancel, continue or if_failed (a batch's on_failure callback).",
                        max_length=16,
                        null=True,
                    ),
                ),
                (
                    "workflow_id",
                    models.BigIntegerField(
                        blank=True,
                        editable=False,
                        help_text="The workflow or batch of this step.",
                        null=True,
                    ),
                ),
                (
                    "flow_controlled",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        editable=False,
                        help_text="Its queue is under flow control (limits or a pause).",
                    ),
                ),
            ],
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "db_table": "pgqueue_job",
                "permissions": [
                    ("replay_job", "Can replay jobs or retry them now"),
                    ("cancel_job", "Can cancel, abort or dead-letter jobs"),
                ],
                "indexes": [
                    models.Index(
                        condition=models.Q(("status__in", ["pending", "failed"])),
                        fields=["-priority", "next_attempt_at", "id"],
                        name="pgq_job_due_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "in_progress")),
                        fields=["locked_until"],
                        name="pgq_job_lease_idx",
                    ),
                    models.Index(
                        condition=models.Q(("atomic", True), ("status__in", ["pending", "failed"])),
                        fields=["-priority", "next_attempt_at", "id"],
                        name="pgq_job_atomic_due_idx",
                    ),
                    models.Index(
                        models.F("queue_name"),
                        django.db.models.functions.comparison.Coalesce(
                            "concurrency_key", models.Value("")
                        ),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("next_attempt_at"),
                        models.F("id"),
                        condition=models.Q(
                            ("flow_controlled", True), ("status__in", ["pending", "failed"])
                        ),
                        name="pgq_job_flow_due_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "in_progress")
                        ),
                        fields=["queue_name", "concurrency_key"],
                        name="pgq_job_flow_run_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status__in", ["succeeded", "dead", "cancelled"])),
                        fields=["updated_at"],
                        name="pgq_job_finished_idx",
                    ),
                    models.Index(
                        condition=models.Q(("workflow_id__isnull", False)),
                        fields=["workflow_id"],
                        name="pgq_job_step_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "waiting")),
                        fields=["workflow_id"],
                        name="pgq_job_waiting_idx",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "in_progress",
                                    "succeeded",
                                    "failed",
                                    "dead",
                                    "cancelled",
                                    "waiting",
                                ],
                            )
                        ),
                        name="pgq_job_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("locked_by__isnull", False),
                                ("locked_until__isnull", False),
                                ("status", "in_progress"),
                            ),
                            models.Q(
                                models.Q(("status", "in_progress"), _negated=True),
                                ("locked_until__isnull", True),
                            ),
                            _connector="OR",
                        ),
                        name="pgq_job_lease_iff_running",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("attempts__gte", 0), ("max_attempts__gte", 1)),
                        name="pgq_job_attempts_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("status", "succeeded"), _negated=True),
                            ("finished_at__isnull", False),
                            _connector="OR",
                        ),
                        name="pgq_job_finished_has_time",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(
                            ("status__in", ["pending", "in_progress", "failed"]),
                            ("unique_key__isnull", False),
                        ),
                        fields=("task_path", "unique_key"),
                        name="pgq_job_unique_live",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Application",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "uid",
                    models.CharField(
                        help_text="Your own id for this customer, e.g. 'cust_42' (what send_event takes).",
                        max_length=255,
                    ),
                ),
                ("name", models.CharField(blank=True, default="", max_length=255)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                (
                    "is_active",
                    models.BooleanField(
                        default=True, help_text="Events cannot be sent to an inactive application."
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "verbose_name": "webhook application",
                "verbose_name_plural": "webhook applications",
                "db_table": "pgqueue_application",
                "constraints": [
                    models.UniqueConstraint(fields=("uid",), name="pgq_app_uid_uniq"),
                    models.CheckConstraint(
                        condition=models.Q(("uid", ""), _negated=True), name="pgq_app_uid_set"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Endpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "url",
                    models.URLField(
                        help_text="Where events are POSTed (https unless ALLOW_HTTP).",
                        max_length=2048,
                    ),
                ),
                (
                    "secret_ciphertext",
                    models.TextField(
                        db_column="secret",
                        default="",
                        editable=False,
                        help_text="Encrypted signing secret.",
                    ),
                ),
                (
                    "previous_secrets",
                    models.JSONField(
                        blank=True,
                        default=list,
                        editable=False,
                        help_text="Encrypted secrets still signing during a rotation, with their expiry.",
                    ),
                ),
                (
                    "event_types",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="Event types to receive ('order.*' for a family); empty receives all.",
                    ),
                ),
                (
                    "headers",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="Extra HTTP headers sent with every delivery.",
                    ),
                ),
                ("description", models.TextField(blank=True, default="")),
                (
                    "is_active",
                    models.BooleanField(
                        default=True,
                        help_text="Inactive endpoints get no new events and nothing is sent.",
                    ),
                ),
                ("disabled_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("disabled_reason", models.TextField(blank=True, default="", editable=False)),
                (
                    "breaker_state",
                    models.CharField(
                        choices=[
                            ("closed", "Closed (delivering)"),
                            ("open", "Open (paused after failures)"),
                            ("half_open", "Half-open (one probe in flight)"),
                        ],
                        default="closed",
                        editable=False,
                        max_length=16,
                    ),
                ),
                ("consecutive_failures", models.PositiveIntegerField(default=0, editable=False)),
                (
                    "open_until",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="While the circuit is open: when the next probe may go out.",
                        null=True,
                    ),
                ),
                (
                    "breaker_cooldown",
                    models.FloatField(
                        default=0.0,
                        editable=False,
                        help_text="Current cool-down in seconds (grows).",
                    ),
                ),
                (
                    "failing_since",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="First failure since the last success; drives auto-disable.",
                        null=True,
                    ),
                ),
                ("last_success_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "max_in_flight",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most deliveries to this endpoint in flight at once, across all workers. Empty: PGQUEUE['WEBHOOKS']['MAX_IN_FLIGHT'].",
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                    ),
                ),
                (
                    "ordering",
                    models.CharField(
                        choices=[
                            ("none", "None (in parallel, oldest first)"),
                            ("endpoint", "FIFO for the whole endpoint"),
                            ("key", "FIFO per ordering key"),
                        ],
                        default="none",
                        help_text="FIFO: deliveries go one at a time in event order, for the whole endpoint or per ordering key. Applies to events sent after the change.",
                        max_length=16,
                    ),
                ),
                (
                    "rate_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most requests per rate period (empty: no rate limit).",
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                    ),
                ),
                (
                    "rate_period",
                    models.PositiveIntegerField(
                        choices=[(1, "per second"), (60, "per minute"), (3600, "per hour")],
                        default=1,
                        help_text="The period the rate limit counts requests in.",
                    ),
                ),
                (
                    "rate_tat",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Rate limit state: when the bucket is full again (GCRA).",
                        null=True,
                    ),
                ),
                (
                    "served_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When a claim last took deliveries of this endpoint (the round robin).",
                        null=True,
                    ),
                ),
                (
                    "channels",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], output_field=models.JSONField()),
                        default=list,
                        help_text="Channels to receive: only events carrying one of them. Empty receives every event whatever its channels.",
                    ),
                ),
                (
                    "application",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        help_text="The customer this endpoint belongs to: it receives only that application's events. Empty: a global endpoint, receiving events sent without an application.",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="endpoints",
                        to="django_pgqueue.application",
                    ),
                ),
                (
                    "relay",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Relay mode (broker destinations only): events go to the broker in batches, in event order, one batch in flight; consumers fan out from the broker.",
                    ),
                ),
            ],
            options={
                "verbose_name": "webhook endpoint",
                "verbose_name_plural": "webhook endpoints",
                "db_table": "pgqueue_endpoint",
                "permissions": [
                    ("manage_endpoint", "Can enable, disable, reset and test webhook endpoints"),
                    (
                        "manage_endpoint_secret",
                        "Can reveal and rotate signing secrets of webhook endpoints",
                    ),
                ],
                "indexes": [models.Index(fields=["application", "id"], name="pgq_ep_app_idx")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("breaker_state__in", ["closed", "open", "half_open"])),
                        name="pgq_ep_breaker_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("breaker_state", "closed"),
                            ("open_until__isnull", False),
                            _connector="OR",
                        ),
                        name="pgq_ep_open_has_until",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("max_in_flight__isnull", True),
                            ("max_in_flight__gte", 1),
                            _connector="OR",
                        ),
                        name="pgq_ep_max_in_flight_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("rate_limit__isnull", True), ("rate_limit__gte", 1), _connector="OR"
                        ),
                        name="pgq_ep_rate_limit_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("rate_period__gte", 1)), name="pgq_ep_rate_period_pos"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("ordering__in", ["none", "endpoint", "key"])),
                        name="pgq_ep_ordering_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("secret_ciphertext__startswith", "whsec_"), _negated=True
                        ),
                        name="pgq_ep_secret_encrypted",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("event_type", models.CharField(max_length=255)),
                ("payload", models.JSONField()),
                (
                    "body",
                    models.TextField(
                        editable=False, help_text="The exact JSON sent (signed bytes)."
                    ),
                ),
                ("msg_id", models.CharField(editable=False, max_length=64)),
                (
                    "idempotency_key",
                    models.CharField(
                        blank=True,
                        help_text="send_event with the same key returns this event instead of a new one.",
                        max_length=255,
                        null=True,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "channels",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], output_field=models.JSONField()),
                        default=list,
                        help_text="Channels the event was sent on.",
                    ),
                ),
                (
                    "application",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        help_text="The customer the event was sent for (empty: global endpoints).",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="django_pgqueue.application",
                    ),
                ),
                (
                    "ordering_key",
                    models.CharField(
                        blank=True,
                        editable=False,
                        help_text="The FIFO line it was sent in (empty: none).",
                        max_length=255,
                        null=True,
                    ),
                ),
            ],
            options={
                "verbose_name": "webhook event",
                "verbose_name_plural": "webhook events",
                "db_table": "pgqueue_event",
                "indexes": [models.Index(fields=["application", "-id"], name="pgq_evt_app_idx")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("event_type", ""), _negated=True),
                        name="pgq_evt_type_set",
                    ),
                    models.UniqueConstraint(fields=("msg_id",), name="pgq_evt_msg_id_uniq"),
                    models.UniqueConstraint(
                        fields=("idempotency_key",), name="pgq_evt_idem_key_uniq"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("in_progress", "In progress"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed, retry scheduled"),
                            ("dead", "Dead (DLQ)"),
                            ("cancelled", "Cancelled"),
                            ("waiting", "Waiting for its parents"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0, help_text="Claims so far; counted when a worker claims the row."
                    ),
                ),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Earliest time the row may be claimed (run_after, or the retry time).",
                    ),
                ),
                (
                    "locked_by",
                    models.UUIDField(
                        blank=True,
                        editable=False,
                        help_text="Fencing token of the most recent claim.",
                        null=True,
                    ),
                ),
                (
                    "locked_until",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Lease expiry (database clock).",
                        null=True,
                    ),
                ),
                (
                    "worker_id",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Worker of the most recent claim.",
                        max_length=128,
                    ),
                ),
                ("last_error", models.TextField(blank=True, default="")),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("started_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("finished_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "endpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="django_pgqueue.endpoint",
                    ),
                ),
                (
                    "event",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="django_pgqueue.event",
                    ),
                ),
                (
                    "ordering_key",
                    models.CharField(
                        blank=True,
                        editable=False,
                        help_text="FIFO line this delivery waits in (empty: not ordered).",
                        max_length=255,
                        null=True,
                    ),
                ),
            ],
            options={
                "verbose_name": "webhook delivery",
                "verbose_name_plural": "webhook deliveries",
                "db_table": "pgqueue_delivery",
                "permissions": [
                    ("replay_delivery", "Can replay webhook deliveries or retry them now"),
                    ("cancel_delivery", "Can cancel or dead-letter webhook deliveries"),
                ],
                "indexes": [
                    models.Index(
                        condition=models.Q(("status__in", ["pending", "failed"])),
                        fields=["endpoint_id", "next_attempt_at", "id"],
                        name="pgq_dlv_due_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "in_progress")),
                        fields=["locked_until"],
                        name="pgq_dlv_lease_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "in_progress")),
                        fields=["endpoint_id"],
                        name="pgq_dlv_flight_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("ordering_key__isnull", False),
                            ("status__in", ["pending", "failed", "in_progress"]),
                        ),
                        fields=["endpoint_id", "ordering_key", "id"],
                        name="pgq_dlv_fifo_idx",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "in_progress",
                                    "succeeded",
                                    "failed",
                                    "dead",
                                    "cancelled",
                                    "waiting",
                                ],
                            )
                        ),
                        name="pgq_dlv_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("locked_by__isnull", False),
                                ("locked_until__isnull", False),
                                ("status", "in_progress"),
                            ),
                            models.Q(
                                models.Q(("status", "in_progress"), _negated=True),
                                ("locked_until__isnull", True),
                            ),
                            _connector="OR",
                        ),
                        name="pgq_dlv_lease_iff_running",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("attempts__gte", 0), ("max_attempts__gte", 1)),
                        name="pgq_dlv_attempts_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("status", "succeeded"), _negated=True),
                            ("finished_at__isnull", False),
                            _connector="OR",
                        ),
                        name="pgq_dlv_finished_has_time",
                    ),
                    models.UniqueConstraint(
                        fields=("event", "endpoint"), name="pgq_dlv_event_endpoint"
                    ),
                ],
            },
        ),
        # QUEUE_AUTOVACUUM: the queue tables' autovacuum settings.
        migrations.RunSQL(
            sql=QUEUE_AUTOVACUUM.set_sql(),
            reverse_sql=QUEUE_AUTOVACUUM.reset_sql(),
        ),
        # PARKING_TRIGGER: a disabled endpoint's waiting deliveries leave the claim's way.
        migrations.RunSQL(
            sql=PARKING_TRIGGER.create_sql(),
            reverse_sql=PARKING_TRIGGER.drop_sql(),
        ),
        migrations.CreateModel(
            name="DeliveryAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("attempt", models.PositiveIntegerField()),
                ("started_at", models.DateTimeField()),
                ("duration_ms", models.PositiveIntegerField(default=0)),
                ("status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("response_headers", models.JSONField(blank=True, default=dict)),
                ("response_body", models.TextField(blank=True, default="")),
                ("response_truncated", models.BooleanField(default=False)),
                ("error", models.TextField(blank=True, default="")),
                ("worker_id", models.CharField(blank=True, default="", max_length=128)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "delivery",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts_log",
                        to="django_pgqueue.delivery",
                    ),
                ),
                (
                    "request_headers",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value({}, output_field=models.JSONField()),
                        default=dict,
                    ),
                ),
            ],
            options={
                "verbose_name": "webhook delivery attempt",
                "verbose_name_plural": "webhook delivery attempts",
                "db_table": "pgqueue_delivery_attempt",
                "ordering": ["delivery_id", "id"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("attempt__gte", 1)), name="pgq_att_attempt_positive"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                ("task_path", models.CharField(max_length=255)),
                ("cron", models.CharField(max_length=200)),
                ("timezone", models.CharField(default="UTC", max_length=64)),
                ("args", models.JSONField(blank=True, default=list)),
                ("kwargs", models.JSONField(blank=True, default=dict)),
                ("queue_name", models.CharField(blank=True, default="", max_length=100)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[
                            ("latest", "Run the latest missed tick once"),
                            ("all", "Run every missed tick"),
                            ("none", "Skip missed ticks"),
                        ],
                        default="latest",
                        max_length=8,
                    ),
                ),
                (
                    "origin",
                    models.CharField(
                        default="settings", help_text="settings or decorator", max_length=16
                    ),
                ),
                (
                    "paused",
                    models.BooleanField(
                        default=False,
                        help_text="A paused schedule enqueues nothing; missed ticks are skipped.",
                    ),
                ),
                (
                    "last_tick_at",
                    models.DateTimeField(
                        blank=True, help_text="The latest tick enqueued (or skipped).", null=True
                    ),
                ),
                ("last_job_id", models.BigIntegerField(blank=True, null=True)),
                ("next_tick_at", models.DateTimeField(blank=True, null=True)),
                (
                    "declared_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="When a worker last found it in its code or settings.",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "db_table": "pgqueue_schedule",
                "ordering": ["name"],
                "permissions": [
                    ("pause_schedule", "Can pause and resume schedules"),
                    ("run_schedule", "Can run a schedule now, outside its cron"),
                ],
            },
        ),
        migrations.CreateModel(
            name="ScheduleTick",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("schedule_name", models.CharField(max_length=200)),
                ("tick_at", models.DateTimeField()),
                ("job_id", models.BigIntegerField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
            options={
                "verbose_name": "schedule tick",
                "db_table": "pgqueue_schedule_tick",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("schedule_name", "tick_at"), name="pgq_tick_once"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                (
                    "worker_id",
                    models.CharField(
                        max_length=255, primary_key=True, serialize=False, verbose_name="worker id"
                    ),
                ),
                ("host", models.CharField(max_length=255, verbose_name="host")),
                ("pid", models.IntegerField(verbose_name="process id")),
                ("version", models.CharField(max_length=64, verbose_name="version")),
                ("queues", models.JSONField(default=list, verbose_name="queues")),
                ("concurrency", models.IntegerField(verbose_name="concurrency")),
                ("started_at", models.DateTimeField(verbose_name="started at")),
                ("last_seen_at", models.DateTimeField(verbose_name="last seen at")),
            ],
            options={
                "verbose_name": "worker",
                "verbose_name_plural": "workers",
                "db_table": "pgqueue_worker",
                "ordering": ("-started_at",),
            },
        ),
        migrations.CreateModel(
            name="MessageQueue",
            fields=[
                ("name", models.CharField(max_length=47, primary_key=True, serialize=False)),
                (
                    "unlogged",
                    models.BooleanField(
                        default=False,
                        help_text="UNLOGGED message table: fast, and emptied by a database crash.",
                    ),
                ),
                (
                    "max_reads",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="A message read this many times is dead-lettered on its next read.",
                        null=True,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "dead_letter",
                    models.ForeignKey(
                        blank=True,
                        db_column="dead_letter",
                        help_text="Queue that receives dead letters (the queue's own archive if empty).",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="dead_letter_sources",
                        to="django_pgqueue.messagequeue",
                    ),
                ),
            ],
            options={
                "verbose_name": "message queue",
                "db_table": "pgqueue_mq_queue",
                "ordering": ("name",),
                "permissions": [
                    (
                        "operate_messagequeue",
                        "Can delete, archive or move messages of message queues",
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("max_reads__isnull", True), ("max_reads__gte", 1), _connector="OR"
                        ),
                        name="pgqueue_mq_max_reads_positive",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("dead_letter__isnull", True),
                            ("max_reads__isnull", False),
                            _connector="OR",
                        ),
                        name="pgqueue_mq_dead_letter_reads",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("dead_letter", models.F("name")), _negated=True),
                        name="pgqueue_mq_dead_letter_other",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ApiKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(help_text="Who or what uses this key.", max_length=255)),
                ("prefix", models.CharField(editable=False, max_length=16)),
                ("key_hash", models.CharField(editable=False, max_length=64)),
                (
                    "scopes",
                    models.JSONField(
                        default=list,
                        help_text="What the key may do: 'send', 'read', 'manage' and/or 'secrets'.",
                    ),
                ),
                (
                    "rate_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Requests per rate window for this key (empty: PGQUEUE['API']['RATE_LIMIT']).",
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "last_used_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Updated at most once a minute.",
                        null=True,
                    ),
                ),
                ("revoked_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "application",
                    models.ForeignKey(
                        blank=True,
                        help_text="Limit the key to this application's objects (empty: every application).",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_keys",
                        to="django_pgqueue.application",
                    ),
                ),
            ],
            options={
                "verbose_name": "API key",
                "verbose_name_plural": "API keys",
                "db_table": "pgqueue_api_key",
                "constraints": [
                    models.UniqueConstraint(fields=("prefix",), name="pgq_apikey_prefix_uniq"),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("rate_limit__isnull", True), ("rate_limit__gte", 1), _connector="OR"
                        ),
                        name="pgq_apikey_rate_pos",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ApiRateLimit",
            fields=[
                (
                    "key",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="rate_state",
                        serialize=False,
                        to="django_pgqueue.apikey",
                    ),
                ),
                ("tat", models.DateTimeField(help_text="When the key's allowance is full again.")),
            ],
            options={
                "verbose_name": "API rate-limit state",
                "verbose_name_plural": "API rate-limit states",
                "db_table": "pgqueue_api_rate",
            },
        ),
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                (
                    "concurrency",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs of this queue running at once, across every worker (empty: no limit).",
                        null=True,
                    ),
                ),
                (
                    "key_concurrency",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs of one concurrency key running at once (empty: no limit).",
                        null=True,
                    ),
                ),
                (
                    "rate_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs started per rate period (empty: no rate limit).",
                        null=True,
                    ),
                ),
                (
                    "rate_period",
                    models.PositiveIntegerField(
                        db_default=1,
                        default=1,
                        help_text="Seconds the rate limit counts starts in.",
                    ),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When an operator paused the queue (empty: running).",
                        null=True,
                    ),
                ),
                (
                    "served_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When a claim last took jobs of this queue (the claim's fence).",
                        null=True,
                    ),
                ),
                (
                    "rate_tat",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Rate limit state: when the bucket is full again (GCRA).",
                        null=True,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), editable=False
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), editable=False
                    ),
                ),
                (
                    "key_rate_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs of one concurrency key started per key rate period (empty: no limit).",
                        null=True,
                    ),
                ),
                (
                    "key_rate_period",
                    models.PositiveIntegerField(
                        db_default=1,
                        default=1,
                        help_text="Seconds the per-key rate limit counts starts in.",
                    ),
                ),
                (
                    "overridden_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When the limits were last set at run time (configure, the admin, the API or the command); they then win over PGQUEUE['QUEUES'] until reset. Empty: the limits follow the settings.",
                        null=True,
                    ),
                ),
            ],
            options={
                "verbose_name": "queue",
                "db_table": "pgqueue_queue",
                "ordering": ("name",),
                "permissions": [("pause_queue", "Can pause and resume queues")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("concurrency__isnull", True), ("concurrency__gte", 1), _connector="OR"
                        ),
                        name="pgq_queue_concurrency_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("key_concurrency__isnull", True),
                            ("key_concurrency__gte", 1),
                            _connector="OR",
                        ),
                        name="pgq_queue_key_conc_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("rate_limit__isnull", True), ("rate_limit__gte", 1), _connector="OR"
                        ),
                        name="pgq_queue_rate_limit_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("rate_period__gte", 1)),
                        name="pgq_queue_rate_period_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("key_rate_limit__isnull", True),
                            ("key_rate_limit__gte", 1),
                            _connector="OR",
                        ),
                        name="pgq_queue_key_rate_pos",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("key_rate_period__gte", 1)),
                        name="pgq_queue_key_period_pos",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="QueueKeyRate",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=200)),
                (
                    "rate_tat",
                    models.DateTimeField(
                        help_text="When this key's bucket is full again (GCRA theoretical arrival time)."
                    ),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        db_column="queue_name",
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="key_rates",
                        to="django_pgqueue.queue",
                    ),
                ),
            ],
            options={
                "verbose_name": "queue key rate",
                "db_table": "pgqueue_queue_key_rate",
                "constraints": [
                    models.UniqueConstraint(fields=("queue", "key"), name="pgq_queue_key_rate_uniq")
                ],
            },
        ),
        migrations.CreateModel(
            name="TopicBinding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("pattern", models.TextField()),
                (
                    "bound_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        db_column="queue_name",
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="topic_bindings",
                        to="django_pgqueue.messagequeue",
                    ),
                ),
            ],
            options={
                "verbose_name": "topic binding",
                "db_table": "pgqueue_mq_topic_binding",
                "ordering": ("-bound_at", "pattern"),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("pattern", "queue"), name="pgqueue_mq_topic_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(TOPIC_ROUTING, reverse_sql=TOPIC_ROUTING_UNDO),
        migrations.CreateModel(
            name="Rollup",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "kind",
                        "name",
                        "minute",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("queue", "job queue"),
                            ("endpoint", "endpoint"),
                            ("application", "application"),
                            ("mq", "message queue"),
                        ],
                        max_length=16,
                        verbose_name="kind",
                    ),
                ),
                ("name", models.CharField(max_length=255, verbose_name="name")),
                ("minute", models.DateTimeField(verbose_name="minute")),
                ("ok", models.BigIntegerField(default=0, verbose_name="succeeded")),
                ("failed", models.BigIntegerField(default=0, verbose_name="failed")),
                ("retried", models.BigIntegerField(default=0, verbose_name="retried")),
                (
                    "wait_hist",
                    django_pgqueue.models.fields.BigIntArrayField(blank=True, default=list),
                ),
                (
                    "run_hist",
                    django_pgqueue.models.fields.BigIntArrayField(blank=True, default=list),
                ),
                ("depth", models.BigIntegerField(blank=True, null=True, verbose_name="depth")),
            ],
            options={
                "verbose_name": "rollup minute",
                "verbose_name_plural": "rollup minutes",
                "db_table": "pgqueue_rollup",
                "indexes": [models.Index(fields=["minute"], name="pgqueue_rollup_minute")],
            },
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "kind",
                    models.CharField(
                        choices=[("workflow", "Workflow"), ("batch", "Batch")],
                        default="workflow",
                        max_length=16,
                    ),
                ),
                ("step_count", models.PositiveIntegerField(default=0)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("cancelled_at", models.DateTimeField(blank=True, editable=False, null=True)),
            ],
            options={
                "verbose_name": "workflow",
                "verbose_name_plural": "workflows",
                "db_table": "pgqueue_workflow",
                "permissions": [("cancel_workflow", "Can cancel workflows or retry their steps")],
            },
        ),
        migrations.CreateModel(
            name="WorkflowEdge",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("workflow_id", models.BigIntegerField()),
                ("parent_id", models.BigIntegerField()),
                ("child_id", models.BigIntegerField()),
                ("counted", models.BooleanField(db_default=False, default=False)),
            ],
            options={
                "db_table": "pgqueue_workflow_edge",
                "indexes": [
                    models.Index(fields=["parent_id"], name="pgq_edge_parent_idx"),
                    models.Index(fields=["child_id"], name="pgq_edge_child_idx"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("parent_id", "child_id"), name="pgq_edge_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(CREATE_HISTORY, reverse_sql=DROP_HISTORY),
        migrations.CreateModel(
            name="JobHistory",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("in_progress", "In progress"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed, retry scheduled"),
                            ("dead", "Dead (DLQ)"),
                            ("cancelled", "Cancelled"),
                            ("waiting", "Waiting for its parents"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("priority", models.SmallIntegerField(default=0, help_text="Higher runs first.")),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0, help_text="Claims so far; counted when a worker claims the row."
                    ),
                ),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Earliest time the row may be claimed (run_after, or the retry time).",
                    ),
                ),
                (
                    "locked_by",
                    models.UUIDField(
                        blank=True,
                        editable=False,
                        help_text="Fencing token of the most recent claim.",
                        null=True,
                    ),
                ),
                (
                    "locked_until",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Lease expiry (database clock).",
                        null=True,
                    ),
                ),
                (
                    "worker_id",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Worker of the most recent claim.",
                        max_length=128,
                    ),
                ),
                ("last_error", models.TextField(blank=True, default="")),
                (
                    "errors",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="One entry per failed attempt, oldest first.",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("started_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "finished_at",
                    models.DateTimeField(
                        help_text="When the job finished (its last change, for a job that never ran)."
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "task_path",
                    models.CharField(help_text="Import path of the Task object.", max_length=255),
                ),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("backend", models.CharField(default="default", max_length=100)),
                ("args", models.JSONField(blank=True, default=list)),
                ("kwargs", models.JSONField(blank=True, default=dict)),
                ("result", models.JSONField(blank=True, null=True)),
                (
                    "worker_ids",
                    models.JSONField(
                        blank=True, default=list, help_text="Worker of each attempt, in order."
                    ),
                ),
                (
                    "abort_requested_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When an operator asked to abort the running attempt; its worker then records it as cancelled.",
                        null=True,
                    ),
                ),
                (
                    "atomic",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Claimed, run and completed in one transaction (atomic tasks).",
                    ),
                ),
                (
                    "unique_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="At most one live job per task and key (unique tasks).",
                        max_length=255,
                        null=True,
                    ),
                ),
                ("trace_context", models.JSONField(blank=True, editable=False, null=True)),
                (
                    "concurrency_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="The key this job's queue limits per key (queues.configure(key_concurrency=)).",
                        max_length=200,
                        null=True,
                    ),
                ),
                (
                    "progress",
                    models.FloatField(
                        blank=True,
                        db_default=None,
                        editable=False,
                        help_text="How far the task says it is, from 0 to 1.",
                        null=True,
                    ),
                ),
                (
                    "progress_at",
                    models.DateTimeField(blank=True, db_default=None, editable=False, null=True),
                ),
                (
                    "progress_message",
                    models.TextField(blank=True, db_default=None, editable=False, null=True),
                ),
                (
                    "failed_parents",
                    models.PositiveIntegerField(
                        blank=True,
                        editable=False,
                        help_text="Parents that ended without success.",
                        null=True,
                    ),
                ),
                (
                    "pending_parents",
                    models.PositiveIntegerField(
                        blank=True,
                        editable=False,
                        help_text="Parents that have not ended yet.",
                        null=True,
                    ),
                ),
                (
                    "step_name",
                    models.CharField(blank=True, editable=False, max_length=200, null=True),
                ),
                (
                    "step_policy",
                    models.CharField(
                        blank=True,
                        editable=False,
                        help_text="What a parent's failure does to this step: cancel, continue or if_failed (a batch's on_failure callback).",
                        max_length=16,
                        null=True,
                    ),
                ),
                (
                    "workflow_id",
                    models.BigIntegerField(
                        blank=True,
                        editable=False,
                        help_text="The workflow or batch of this step.",
                        null=True,
                    ),
                ),
                (
                    "flow_controlled",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        editable=False,
                        help_text="Its queue is under flow control (limits or a pause).",
                    ),
                ),
            ],
            options={
                "verbose_name": "finished job (history)",
                "verbose_name_plural": "finished jobs (history)",
                "db_table": "pgqueue_job_history",
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]

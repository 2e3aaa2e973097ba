"""Topic routing for message queues: pgmq's ``topic_bindings`` as a table of ours.

``compiled_regex`` is the routing rule, written once here and computed by PostgreSQL
from the pattern (a stored generated column, as in pgmq): ``.`` escaped, ``*`` one
segment (``[^.]+``), ``#`` any run of characters (``.*``), anchored at both ends.
Patterns are validated before they are bound (``mq.validation.TOPIC_PATTERN_RULES``:
only letters, digits, ``.``, ``_``, ``-``, ``*`` and ``#``), so no other character
needs escaping. Both doors route with ``mq.sql`` "route" over this column.

The foreign key to the registry is the database's, with ON DELETE CASCADE: ``mq.drop``
and the SQL API's ``drop_queue`` delete the registry row by SQL, and the bindings go
with it.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

_COMPILED = """
ALTER TABLE pgqueue_mq_topic_binding ADD COLUMN compiled_regex text GENERATED ALWAYS AS (
    '^' || pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
        pattern, '.', '\\.'), '*', '[^.]+'), '#', '.*') || '$'
) STORED;
ALTER TABLE pgqueue_mq_topic_binding ADD CONSTRAINT pgqueue_mq_topic_queue_fk
    FOREIGN KEY (queue_name) REFERENCES pgqueue_mq_queue (name) ON DELETE CASCADE;
"""

_UNDO = """
ALTER TABLE pgqueue_mq_topic_binding DROP CONSTRAINT pgqueue_mq_topic_queue_fk;
ALTER TABLE pgqueue_mq_topic_binding DROP COLUMN compiled_regex;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0017_queues"),
    ]

    operations = [
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
        migrations.RunSQL(_COMPILED, reverse_sql=_UNDO),
    ]

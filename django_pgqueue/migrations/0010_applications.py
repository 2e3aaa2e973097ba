"""Applications (one per customer of a multi-tenant project), endpoints and events
scoped to one, and channels. Every new column is nullable or has a constant default,
so adding them rewrites no table."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0009_message_queues"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="channels",
            field=models.JSONField(
                blank=True,
                db_default=models.Value([], output_field=models.JSONField()),
                default=list,
                help_text="Channels to receive: only events carrying one of them. Empty receives every event whatever its channels.",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="channels",
            field=models.JSONField(
                blank=True,
                db_default=models.Value([], output_field=models.JSONField()),
                default=list,
                help_text="Channels the event was sent on.",
            ),
        ),
        migrations.AlterField(
            model_name="endpoint",
            name="event_types",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Event types to receive ('order.*' for a family); empty receives all.",
            ),
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
        migrations.AddField(
            model_name="endpoint",
            name="application",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                help_text="The customer this endpoint belongs to: it receives only that application's events. Empty: a global endpoint, receiving events sent without an application.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="endpoints",
                to="django_pgqueue.application",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="application",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                help_text="The customer the event was sent for (empty: global endpoints).",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="django_pgqueue.application",
            ),
        ),
        migrations.AddIndex(
            model_name="endpoint",
            index=models.Index(fields=["application", "id"], name="pgq_ep_app_idx"),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(fields=["application", "-id"], name="pgq_evt_app_idx"),
        ),
    ]

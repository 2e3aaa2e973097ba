"""A delivery has no priority (the claim orders deliveries by due time, per endpoint)
and no JSON error history (its history is the attempt log): the columns it had from
the shared queue row were never written. Dropping a column rewrites no table."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0011_operator_permissions"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="delivery",
            name="errors",
        ),
        migrations.RemoveField(
            model_name="delivery",
            name="priority",
        ),
    ]

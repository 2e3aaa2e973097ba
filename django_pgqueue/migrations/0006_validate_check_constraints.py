"""Validate the constraints 0005 added ``NOT VALID``, each in this migration's own
transaction: ``VALIDATE CONSTRAINT`` reads the table under a ``SHARE UPDATE
EXCLUSIVE`` lock, so claims, completions and enqueues go on meanwhile."""

from django.contrib.postgres.operations import ValidateConstraint
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0005_cheaper_check_constraints"),
    ]

    operations = [
        ValidateConstraint(model_name=model_name, name=f"{prefix}_{rule}")
        for model_name, prefix, rules in (
            ("job", "pgq_job", ("status_valid", "lease_iff_running", "parents_range")),
            ("delivery", "pgq_dlv", ("status_valid", "lease_iff_running")),
        )
        for rule in rules
    ]

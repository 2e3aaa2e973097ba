"""``periodic/store.py`` is the one writer of schedule and tick rows: the scheduler and
the admin call it, and nothing else in the package writes them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from django_pgqueue.admin.schedules import ScheduleAdmin
from django_pgqueue.models import Schedule

PACKAGE = Path(__file__).parent.parent.parent / "django_pgqueue"
WRITES = re.compile(
    r"\bsql\.(UPSERT_SCHEDULE|INSERT_TICK|SET_TICK_JOB|ADVANCE_SCHEDULE)\b"
    r"|\b(Schedule|ScheduleTick)\.objects\b[^\n]*\.(update|create|delete|bulk_create|"
    r"get_or_create|update_or_create)\("
    r"|(INSERT INTO|UPDATE|DELETE FROM) \{(SCHEDULE_TABLE|TICK_TABLE)\}"
)


def test_no_module_but_the_store_writes_schedule_or_tick_rows():
    writers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and WRITES.search(path.read_text())
    }
    # sql/periodic.py declares the statements; the store is the only one to run them.
    assert writers == {"periodic/store.py", "sql/periodic.py"}


@pytest.mark.django_db
def test_the_admin_deletes_through_the_store(admin_client, monkeypatch):
    from django_pgqueue.periodic import store

    row = Schedule.objects.create(name="gone", task_path="a.b", cron="* * * * *")
    deleted: list[list[int]] = []
    real = store.delete
    monkeypatch.setattr(store, "delete", lambda ids: deleted.append(list(ids)) or real(ids))
    response = admin_client.post(
        f"/admin/django_pgqueue/schedule/{row.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert deleted == [[row.pk]]
    assert not Schedule.objects.filter(pk=row.pk).exists()
    from django.contrib.admin import ModelAdmin

    assert ScheduleAdmin.delete_queryset is not ModelAdmin.delete_queryset

"""Admin of message queues: the list with sizes, browsing, and operations that need POST,
CSRF, the operate permission, and leave a LogEntry."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_pgqueue import mq

from ..admin.conftest import _staff, csrf_client, csrf_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def queues() -> dict[str, int]:
    mq.create("dead")
    mq.create("work", max_reads=1, dead_letter="dead", unlogged=True)
    first = mq.send("work", {"job": 1})
    mq.read("work", vt=0)
    mq.read("work", vt=0)  # -> a dead letter
    kept = mq.send("work", {"job": 2})
    return {"first": first, "kept": kept}


@pytest.fixture
def operator_client():
    return csrf_client(
        _staff("mq_operator", "view_messagequeue", "operate_messagequeue", "view_job")
    )


@pytest.fixture
def viewer_client():
    return csrf_client(_staff("mq_viewer", "view_messagequeue", "view_job"))


def url(name: str, archived: bool = False) -> str:
    base = reverse("admin:django_pgqueue_messagequeue_messages", args=[name])
    return base + ("?archived=1" if archived else "")


def test_queue_list_and_dashboard_show_sizes_and_policy(queues, viewer_client):
    page = viewer_client.get(reverse("admin:django_pgqueue_messagequeue_changelist"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "work" in text and "dead" in text and url("work") in text
    dashboard = viewer_client.get(reverse("admin:django_pgqueue_job_dashboard")).content.decode()
    assert 'id="pgq-message-queues"' in dashboard
    assert "after 1 reads, to dead" in dashboard


def test_viewer_browses_but_cannot_operate(queues, viewer_client):
    page = viewer_client.get(url("dead"))
    assert page.status_code == 200 and "dead letter from work" in page.content.decode()
    assert 'name="operation"' not in page.content.decode()
    token = csrf_token(viewer_client, url("work"))
    response = viewer_client.post(
        url("work"),
        {"operation": "delete", "msg_id": [queues["kept"]], "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 403
    assert mq.metrics("work").queue_length == 1


def test_operations_need_csrf(queues, operator_client):
    response = operator_client.post(url("work"), {"operation": "delete", "msg_id": [1]})
    assert response.status_code == 403
    assert mq.metrics("work").queue_length == 1


def test_move_back_archive_and_delete_are_audited(queues, operator_client):
    token = csrf_token(operator_client, url("dead"))
    (letter,) = mq.store.browse("dead")
    response = operator_client.post(
        url("dead"),
        {"operation": "move_back", "msg_id": [letter[0]], "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert mq.metrics("dead").queue_length == 0
    back = sorted(m.message["job"] for m in mq.read("work", vt=0, qty=10))
    assert back == [1, 2]

    ids = [row[0] for row in mq.store.browse("work")]
    operator_client.post(
        url("work"), {"operation": "archive", "msg_id": ids[:1], "csrfmiddlewaretoken": token}
    )
    operator_client.post(
        url("work"), {"operation": "delete", "msg_id": ids[1:], "csrfmiddlewaretoken": token}
    )
    assert mq.metrics("work").queue_length == 0
    assert "job" in operator_client.get(url("work", archived=True)).content.decode()
    notes = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert [n[0] for n in notes] == ["dead", "work", "work"]
    assert notes[0][1].startswith(f"Moved messages [{letter[0]}] back to work")
    assert notes[1][1] == f"Archived messages [{ids[0]}]"
    assert notes[2][1] == f"Deleted messages {ids[1:]}"

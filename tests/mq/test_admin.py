"""Admin of message queues: the list with sizes, browsing, and operations that need POST,
CSRF, the operate permission, and leave a LogEntry."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_pgqueue import mq

from ..admin.conftest import _staff, csrf_client, csrf_token

pytestmark = pytest.mark.django_db

#: The second POST of an operation: the first only asks for confirmation.
YES = {"confirm": "yes"}


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
        {"operation": "move_back", "msg_id": [letter[0]], "csrfmiddlewaretoken": token, **YES},
    )
    assert response.status_code == 302
    assert mq.metrics("dead").queue_length == 0
    back = sorted(m.message["job"] for m in mq.read("work", vt=0, qty=10))
    assert back == [1, 2]

    ids = [row[0] for row in mq.store.browse("work")]
    operator_client.post(
        url("work"),
        {"operation": "archive", "msg_id": ids[:1], "csrfmiddlewaretoken": token, **YES},
    )
    operator_client.post(
        url("work"), {"operation": "delete", "msg_id": ids[1:], "csrfmiddlewaretoken": token, **YES}
    )
    assert mq.metrics("work").queue_length == 0
    assert "job" in operator_client.get(url("work", archived=True)).content.decode()
    notes = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert [n[0] for n in notes] == ["dead", "work", "work"]
    assert notes[0][1].startswith(f"Moved messages [{letter[0]}] back to work")
    assert notes[1][1] == f"Archived messages [{ids[0]}]"
    assert notes[2][1] == f"Deleted messages {ids[1:]}"


def test_move_back_refuses_a_forged_origin_header(queues, operator_client):
    """Anyone who can write to a dead-letter queue can write the header: a letter goes
    back only to a queue whose configured dead-letter queue is this one."""
    mq.create("victim")
    forged = mq.send(
        "dead", {"inject": True}, headers={"x-pgqueue-dead-letter": {"queue": "victim"}}
    )
    plain = mq.send("dead", {"no": "header"})
    (genuine,) = [row[0] for row in mq.store.browse("dead") if row[0] not in (forged, plain)]
    token = csrf_token(operator_client, url("dead"))
    response = operator_client.post(
        url("dead"),
        {
            "operation": "move_back",
            "msg_id": [forged, plain, genuine],
            "csrfmiddlewaretoken": token,
            **YES,
        },
        follow=True,
    )
    text = response.content.decode()
    assert f"Not moved {forged}: its header names queue &#x27;victim&#x27;" in text
    assert f"Not moved {plain}: not a dead letter" in text
    assert mq.metrics("victim").queue_length == 0
    assert sorted(row[0] for row in mq.store.browse("dead")) == [forged, plain]
    assert sorted(m.message["job"] for m in mq.read("work", vt=0, qty=10)) == [1, 2]

    result = mq.store.move_back("dead", [forged])
    assert result.moved == {} and "whose dead-letter queue is not 'dead'" in result.refused[forged]


@pytest.mark.parametrize(
    "page", ["99999999999999999999", "-1", "²", "1_0", " 1", "9" * 5000, "1\x00"]
)
def test_browser_refuses_a_bad_page_with_400(queues, viewer_client, page):
    response = viewer_client.get(url("work"), {"page": page})
    assert response.status_code == 400
    assert "page must be" in response.content.decode()


@pytest.mark.parametrize("msg_id", [str(10**30), "²", "0", "-5", "", "1\x00", "٣"])
def test_operations_refuse_a_bad_msg_id_with_400(queues, operator_client, msg_id):
    token = csrf_token(operator_client, url("work"))
    response = operator_client.post(
        url("work"), {"operation": "delete", "msg_id": [msg_id], "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 400
    assert "msg_id must be" in response.content.decode()
    assert mq.metrics("work").queue_length == 1


def test_a_queue_name_no_queue_can_have_is_a_404(viewer_client):
    base = url("work")
    for name in ("wo%00rk", "x" * 100, "%C2%B2"):
        response = viewer_client.get(base.replace("/work/", f"/{name}/"))
        assert response.status_code == 404


def test_a_partitioned_archive_is_listed_with_its_retention_and_browsed(viewer_client):
    mq.create("kept", archive_retention=dt.timedelta(days=7))
    msg_id = mq.send("kept", {"job": "kept-for-a-week"})
    mq.archive("kept", msg_id)
    page = viewer_client.get(reverse("admin:django_pgqueue_messagequeue_changelist"))
    assert page.status_code == 200 and "7 days" in page.content.decode()
    archive = viewer_client.get(url("kept", archived=True))
    assert archive.status_code == 200 and "kept-for-a-week" in archive.content.decode()

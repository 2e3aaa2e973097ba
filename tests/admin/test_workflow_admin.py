"""The workflow page: its server-drawn graph with each step's state, and cancel as a
POST with CSRF and its own permission, logged."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_pgqueue.models import Job
from django_pgqueue.workflows import Workflow
from testproject.demo import tasks

from .conftest import _staff, csrf_client, csrf_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def workflow():
    wf = Workflow("order-<42>")
    a = wf.add(tasks.add, 1, 2, step_name="fetch")
    wf.add(tasks.add, 3, 4, after=[a], step_name="charge")
    return wf.enqueue()


def test_the_page_draws_the_graph_with_states_escaped(workflow):
    client = csrf_client(_staff("looker", "view_workflow", "view_job"))
    page = client.get(reverse("admin:django_pgqueue_workflow_change", args=[workflow.id]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "<svg" in body and "marker-end" in body
    assert "pgq-waiting" in body and "pgq-pending" in body
    assert "order-&lt;42&gt;" in body and "order-<42>" not in body
    assert "Cancel workflow" not in body  # no permission, no button


def test_cancel_is_a_post_with_csrf_and_permission(workflow):
    url = reverse("admin:django_pgqueue_workflow_cancel", args=[workflow.id])
    page = reverse("admin:django_pgqueue_workflow_change", args=[workflow.id])
    looker = csrf_client(_staff("looker", "view_workflow"))
    token = csrf_token(looker, page)
    assert looker.post(url, {"csrfmiddlewaretoken": token}).status_code == 403
    operator = csrf_client(_staff("boss", "view_workflow", "cancel_workflow"))
    assert operator.get(url).status_code == 405
    assert operator.post(url).status_code == 403  # no CSRF token
    assert set(Job.objects.values_list("status", flat=True)) == {"pending", "waiting"}
    token = csrf_token(operator, page)
    assert "Cancel workflow" in operator.get(page).content.decode()
    response = operator.post(url, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert set(Job.objects.values_list("status", flat=True)) == {"cancelled"}
    assert LogEntry.objects.get().change_message == "Cancel workflow (2 steps changed)"

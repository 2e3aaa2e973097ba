"""How the demo tells the webhook portal who the customer is: each user's username
is the uid of their application (a real project would look at its own account
model, e.g. ``request.user.account.webhook_application``)."""

from __future__ import annotations

from django.http import HttpRequest

from django_pgqueue.models import Application


def current_application(request: HttpRequest) -> Application | None:
    if not request.user.is_authenticated:
        return None
    return Application.objects.filter(uid=request.user.get_username()).first()

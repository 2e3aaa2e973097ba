"""``manage.py pgqueue_api_key``: create, list and revoke keys of the HTTP API."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgqueue.api.keys import SCOPES, create_key, revoke_keys, stored_scopes
from django_pgqueue.conf import get_settings
from django_pgqueue.management.argtypes import positive_int
from django_pgqueue.models.api import ApiKey


class Command(BaseCommand):
    help = (
        "Create, list or revoke keys of the HTTP API (docs/http-api.md). A new key is "
        "printed once, on the last line of the output; only its hash is stored."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser(
            "create", help="Create a key and print it once (the last line)."
        )
        create.add_argument("--name", required=True, help="Who or what uses the key.")
        create.add_argument(
            "--scope",
            action="append",
            required=True,
            choices=SCOPES,
            dest="scopes",
            help=f"What the key may do (repeat for several): {', '.join(SCOPES)}.",
        )
        create.add_argument(
            "--application",
            default=None,
            help="Limit the key to the application with this uid.",
        )
        create.add_argument(
            "--rate-limit",
            type=positive_int,
            default=None,
            help="Requests per rate window for this key (default: PGQUEUE['API']['RATE_LIMIT']).",
        )
        listing = actions.add_parser("list", help="List keys (prefix, name, scopes, last use).")
        listing.add_argument("--all", action="store_true", help="Include revoked keys.")
        revoke = actions.add_parser("revoke", help="Revoke keys by their prefix.")
        revoke.add_argument(
            "prefixes", nargs="+", metavar="PREFIX", help="pgq_<prefix> or <prefix>."
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "create":
            try:
                new = create_key(
                    options["name"],
                    options["scopes"],
                    application=options["application"],
                    rate_limit=options["rate_limit"],
                )
            except (LookupError, ValueError) as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"Created API key {new.api_key.name!r} (pgq_{new.api_key.prefix}, scopes: "
                f"{', '.join(new.api_key.scopes)}). It is shown once; store it now:"
            )
            self.stdout.write(new.key)
        elif action == "list":
            keys = ApiKey.objects.using(get_settings().DATABASE).select_related("application")
            if not options["all"]:
                keys = keys.filter(revoked_at__isnull=True)
            # A header, so the tab-separated columns can be read (and cut) by name.
            self.stdout.write("prefix\tname\tscopes\tapplication\tlast used\tstate")
            for key in keys.order_by("id"):
                state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
                used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
                app = key.application.uid if key.application else "-"
                try:
                    held = stored_scopes(key.scopes, bound=key.application_id is not None)
                    scopes = ",".join(sorted(held))
                except ValueError as exc:  # a row written by SQL; the API refuses it
                    scopes = f"invalid: {exc}"
                self.stdout.write(
                    f"pgq_{key.prefix}\t{key.name}\t{scopes}\t{app}\tlast used {used}\t{state}"
                )
        else:
            try:
                count = revoke_keys(options["prefixes"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if not count:
                raise CommandError("No active key has that prefix.")
            self.stdout.write(f"Revoked {count} key(s).")

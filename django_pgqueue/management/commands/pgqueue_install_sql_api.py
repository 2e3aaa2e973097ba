"""``manage.py pgqueue_install_sql_api``: pgmq's SQL functions over our message queues."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections, transaction

from django_pgqueue.conf import get_settings
from django_pgqueue.mq.sql_api import SqlApiError, install, uninstall
from django_pgqueue.mq.validation import NAME_PATTERN


def schema_name(value: str) -> str:
    if len(value) > 63 or not NAME_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a plain schema name: {value!r}")
    return value


class Command(BaseCommand):
    help = (
        "Install (or reinstall) SQL functions with pgmq's names, signatures and record "
        "types (pgmq.send, pgmq.read, ...) over django_pgqueue's message queues, so pgmq "
        "clients in any language work unchanged. Refuses a schema that holds the pgmq "
        "extension or anything else."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--schema", type=schema_name, default="pgmq", help="Schema of the API (default pgmq)."
        )
        parser.add_argument(
            "--uninstall",
            action="store_true",
            help="Remove the API's schema (queues and their messages stay).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        schema = options["schema"]
        alias = get_settings().DATABASE
        try:
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                if options["uninstall"]:
                    done = uninstall(cursor, schema)
                    self.stdout.write(
                        f"Removed the SQL API from schema {schema}."
                        if done
                        else f"Schema {schema} does not exist; nothing to remove."
                    )
                    return
                data_schema = install(cursor, schema)
        except SqlApiError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Installed the pgmq-compatible SQL API in schema {schema} "
            f"(queues live in schema {data_schema})."
        )

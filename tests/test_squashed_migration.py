"""The app's one migration builds exactly the schema the chain it replaces built.

One fresh database is migrated with the old chain, read from the git history (the
files the squashed migration's ``replaces`` names, each at the last commit that had
it, put on ``MIGRATION_MODULES``), another with the squashed migration; their
``pg_dump --schema-only`` must be identical. Then the old-chain database, given the
app's own migrations, shows the squashed one applied and ``migrate`` does nothing;
and the squashed migration goes back to zero and forward again.
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import importlib
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from django.db import connection

from .support import scratch
from .support.scratch import REPO

pytestmark = pytest.mark.django_db

SQUASHED = "0001_squashed_0024_job_flow_mark"
MIGRATIONS = "django_pgqueue/migrations"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )


def _old_file(name: str) -> str | None:
    """The text of an old migration at the last commit that had it (None if the
    history does not reach it: no git, or a shallow clone)."""
    path = f"{MIGRATIONS}/{name}.py"
    last = _git("rev-list", "-1", "HEAD", "--", path).stdout.strip()
    if not last:
        return None
    for commit in (last, f"{last}^"):  # the commit that deleted it holds it in its parent
        shown = _git("show", f"{commit}:{path}")
        if shown.returncode == 0:
            return shown.stdout
    return None


def _old_chain(into: Path) -> str:
    """Write the replaced migrations into a package under ``into``; its name."""
    if shutil.which("git") is None or _git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("the old migrations are read from the git history, and there is none here")
    squashed = importlib.import_module(f"django_pgqueue.migrations.{SQUASHED}").Migration
    package = into / "pgq_old_chain"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for app_label, name in squashed.replaces:
        assert app_label == "django_pgqueue"
        text = _old_file(name)
        if text is None:
            pytest.skip(f"the git history does not reach {name} (a shallow clone?)")
        (package / f"{name}.py").write_text(text)
    (into / "pgq_old_settings.py").write_text(
        "from testproject.settings import *  # noqa: F403\n"
        'MIGRATION_MODULES = {"django_pgqueue": "pgq_old_chain"}\n'
    )
    return "pgq_old_settings"


def manage(*args: str, url: str, settings: str = "", path: str = "", fails: bool = False) -> str:
    env = {"DJANGO_SETTINGS_MODULE": settings} if settings else {}
    if path:
        env["PYTHONPATH"] = os.pathsep.join((path, str(REPO)))
    done = scratch.manage(*args, url=url, env=env, fails=fails)
    return done.stdout + done.stderr if fails else done.stdout


def _pg_dump() -> str:
    """A pg_dump that can dump the test server (its major version or a later one): the
    one on the PATH, the server packages' or the embedded server's."""
    server = connection.cursor().connection.info.server_version // 10000
    found = [shutil.which("pg_dump"), *glob.glob("/usr/lib/postgresql/*/bin/pg_dump")]
    # The embedded server of scripts/dev.py has its own client. Importing it warns
    # when XDG_RUNTIME_DIR is not set (platformdirs), which the test settings turn
    # into an error; the warning says nothing about the schema.
    with contextlib.suppress(ImportError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        found.append(str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"))
    for path in found:
        if path and os.access(path, os.X_OK):
            shown = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            major = re.search(r"\) (\d+)", shown)
            if major and int(major.group(1)) >= server:
                return path
    pytest.skip(f"the schemas are compared with pg_dump, and none here dumps PostgreSQL {server}")


def schema(url: str, pg_dump: str) -> list[str]:
    """``pg_dump --schema-only`` of the database, as its objects (each with its whole
    text) in sorted order, without comments, owners, privileges, session settings and
    the dump's random ``\\restrict`` key."""
    done = subprocess.run(
        [pg_dump, "--schema-only", "--no-owner", "--no-privileges", "--dbname", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    objects = re.split(r"(?m)^-- Name: .*$", done.stdout)
    return sorted(
        "\n".join(
            line
            for line in text.splitlines()
            if line.strip()
            and not line.startswith(("--", "\\restrict", "\\unrestrict"))
            and not re.match(r"(SET|SELECT pg_catalog\.set_config)\b", line)
        )
        for text in objects[1:]
    )


def mark(url: str) -> str:
    """What ``showmigrations`` shows for the squashed migration: its mark."""
    shown = manage("showmigrations", "django_pgqueue", url=url)
    found = re.findall(r"\[(.)\] (\S+)", shown)
    assert found and found[0][1] == SQUASHED, shown
    return found[0][0]


def assert_same(got: list[str], expected: list[str]) -> None:
    assert got == expected, "\n".join(difflib.unified_diff(expected, got, lineterm="", n=1))


def test_the_squashed_migration_builds_what_the_old_chain_built(tmp_path):
    old_settings = _old_chain(tmp_path)
    pg_dump = _pg_dump()

    def schema_of(url: str) -> list[str]:
        return schema(url, pg_dump)

    with scratch.scratch_databases("chain", "squashed") as (old, new):
        url = {"old": old, "new": new}
        old_plan = manage(
            "migrate", "--plan", url=url["old"], settings=old_settings, path=str(tmp_path)
        )
        assert "django_pgqueue.0024_job_flow_mark" in old_plan and SQUASHED not in old_plan
        manage("migrate", "-v", "0", url=url["old"], settings=old_settings, path=str(tmp_path))
        new_plan = manage("migrate", "--plan", url=url["new"])
        assert f"django_pgqueue.{SQUASHED}" in new_plan
        assert "django_pgqueue.0001_initial" not in new_plan
        # Everything, then back to the squashed migration: the later migrations'
        # reverse must leave what the squashed one built.
        manage("migrate", "-v", "0", url=url["new"])
        manage("migrate", "django_pgqueue", SQUASHED, "-v", "0", url=url["new"])
        built = schema_of(url["new"])
        assert any("pgqueue_job_history" in s for s in built)
        assert_same(built, schema_of(url["old"]))

        # The database that applied the old chain, given the app's own migrations.
        # Django marks it "[-]": applied, its own row not recorded yet; migrate records
        # it and runs nothing.
        assert mark(url["old"]) == "-"
        plan = manage("migrate", "--plan", "django_pgqueue", SQUASHED, url=url["old"])
        assert "No planned migration operations." in plan, plan
        done = manage("migrate", "django_pgqueue", SQUASHED, url=url["old"])
        assert "No migrations to apply." in done
        assert mark(url["old"]) == "X"
        assert_same(schema_of(url["old"]), built)

        # The migrations after the squashed one build the same on both.
        for which in ("new", "old"):
            manage("migrate", "-v", "0", url=url[which])
        latest = schema_of(url["new"])
        assert_same(schema_of(url["old"]), latest)

        # Back to zero and forward again, on both.
        for which in ("new", "old"):
            manage("migrate", "django_pgqueue", "zero", "-v", "0", url=url[which])
            left = [s for s in schema_of(url[which]) if "pgqueue_" in s]
            assert left == [], left
            assert mark(url[which]) == " "
            manage("migrate", "-v", "0", url=url[which])
            assert_same(schema_of(url[which]), latest)


def test_a_database_that_applied_part_of_the_old_chain_is_refused(tmp_path):
    """Django sets a partly applied squash aside, and with the old files gone has
    nothing to run: E005 stops ``migrate`` instead of a silent no-op."""
    old_settings = _old_chain(tmp_path)
    with scratch.scratch_databases("part") as (url,):
        manage(
            "migrate", "django_pgqueue", "0017_queues", "-v", "0",
            url=url, settings=old_settings, path=str(tmp_path),
        )  # fmt: skip
        refused = manage("migrate", url=url, fails=True)
        assert "django_pgqueue.E005" in refused and "0017_queues" in refused, refused
        assert "0024_job_flow_mark" in refused
        checked = manage("check", "--database", "default", url=url, fails=True)
        assert "django_pgqueue.E005" in checked
        # The rest of the old chain, then the app's own migration: recognised.
        manage("migrate", "-v", "0", url=url, settings=old_settings, path=str(tmp_path))
        assert "No migrations to apply." in manage("migrate", "django_pgqueue", SQUASHED, url=url)
        assert mark(url) == "X"

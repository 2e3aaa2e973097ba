#!/usr/bin/env python3
"""One entry point for the demo and the test suite, from a machine with only Python.

    python3 scripts/dev.py demo  [pgqueue_demo args...]
    python3 scripts/dev.py test  [pytest args...]
    python3 scripts/dev.py serve [pgqueue_demo_server args...]
    python3 scripts/dev.py shell -- <command...>

Options, placed before the command's own arguments (before or right after the
subcommand): ``--django {5.2,6.0,6}``, ``--python PATH``, ``--venv DIR``.

This script uses the standard library only. It creates (or reuses) a virtualenv,
installs the project into it, then hands over to ``scripts/with_db.py`` running in
that virtualenv, which provides the database (``DATABASE_URL`` if set, else an
embedded PostgreSQL kept in ``.pgdata/``) and runs the command.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WITH_DB = ROOT / "scripts" / "with_db.py"
MARKER_NAME = ".pgqueue-dev.json"
# Bump when the install recipe below changes, so existing virtualenvs get refreshed.
RECIPE_VERSION = "1"

# "6" is the newest 6.x; "6.0" holds the first 6.x series, whose @task takes no options.
DJANGO_PINS = {"5.2": "Django>=5.2,<6.0", "6.0": "Django>=6.0,<6.1", "6": "Django>=6.0,<7"}
# The embedded server comes from pgserver; with_db.py relies on its 0.1.x internals.
PGSERVER_PIN = "pgserver>=0.1.4,<0.2"
# pgserver publishes wheels for these CPython versions only.
PGSERVER_PYTHONS = {(3, 11), (3, 12)}
COMMANDS = ("demo", "test", "serve", "shell")
PYTEST_NO_TESTS = 5
#: Processes of the parallel pass of a whole-suite run (pytest-xdist, one test database
#: each); PGQUEUE_TEST_PROCESSES=1 runs the suite in one serial pass instead.
DEFAULT_TEST_PROCESSES = 2

USAGE = """\
usage: python3 scripts/dev.py [options] {demo,test,serve,shell} [args...]

commands:
  demo  [args]        set up, migrate, run `manage.py pgqueue_demo [args]`
  test  [args]        set up, run the test suite (`python -m pytest [args]`); with
                      no args, in two passes: `-n 2 -m "not serial"`, then `-m serial`
  serve [args]        set up, migrate, run `manage.py pgqueue_demo_server [args]`
  shell -- CMD...     set up, run CMD in the virtualenv with DATABASE_URL set

options (before the command's own arguments):
  --django {5.2,6.0,6}  Django series (default: 6 on Python >= 3.12, else 5.2)
  --python PATH       interpreter for the virtualenv (default: the one running this)
  --venv DIR          virtualenv folder (default: .venv-py<X.Y>-dj<series> here)
  -h, --help          show this help

database: DATABASE_URL when set (the database is created if missing), otherwise
an embedded PostgreSQL (pgserver) with its data in .pgdata/.
"""


class DevError(Exception):
    """A problem worth a one-line explanation rather than a traceback."""


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


@dataclass
class Options:
    command: str = ""
    django: str | None = None
    python: str | None = None
    venv: str | None = None
    args: list[str] = field(default_factory=list)


def parse_args(argv: list[str]) -> Options:
    """Our options may come before or right after the subcommand; the rest is passed on."""
    opts = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help") and not opts.command:
            print(USAGE, end="")
            raise SystemExit(0)
        name, eq, value = arg.partition("=")
        if name in ("--django", "--python", "--venv"):
            if not eq:
                if i + 1 >= len(argv):
                    raise DevError(f"{name} needs a value")
                value = argv[i + 1]
                i += 1
            setattr(opts, name[2:], value)
        elif not opts.command:
            if arg not in COMMANDS:
                raise DevError(f"unknown command {arg!r}; expected one of {', '.join(COMMANDS)}")
            opts.command = arg
        else:
            opts.args = argv[i + 1 :] if arg == "--" else argv[i:]
            break
        i += 1
    if not opts.command:
        print(USAGE, end="", file=sys.stderr)
        raise SystemExit(2)
    if opts.django is not None and opts.django not in DJANGO_PINS:
        raise DevError(f"--django must be one of {', '.join(DJANGO_PINS)} (got {opts.django!r})")
    if opts.command == "shell" and not opts.args:
        raise DevError("shell needs a command, e.g. `dev.py shell -- python manage.py check`")
    return opts


def resolve_python(spec: str | None) -> tuple[str, tuple[int, int]]:
    """Return the interpreter's path and its (major, minor) version."""
    if spec is None:
        exe = sys.executable
    else:
        found = shutil.which(spec) or (spec if Path(spec).exists() else None)
        if found is None:
            raise DevError(f"--python {spec!r}: no such interpreter")
        exe = found
    # Ask the interpreter itself: this also sees through launchers such as pyenv shims.
    probe = "import sys; print(sys.version_info[0], sys.version_info[1], sys.executable)"
    try:
        out = subprocess.run(
            [exe, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split(maxsplit=2)
    except OSError as exc:
        raise DevError(f"cannot run the interpreter {exe}: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or "").strip() or f"exit code {exc.returncode}"
        raise DevError(f"cannot run the interpreter {exe}:\n{detail}") from exc
    version = (int(out[0]), int(out[1]))
    exe = out[2].strip() or exe
    if version < (3, 11):
        raise DevError(f"{exe} is Python {version[0]}.{version[1]}; the project needs 3.11+")
    return exe, version


def choose_django(requested: str | None, py: tuple[int, int]) -> str:
    if requested is None:
        return "6" if py >= (3, 12) else "5.2"
    if requested in ("6", "6.0") and py < (3, 12):
        raise DevError(
            f"Django 6 needs Python >= 3.12, but the interpreter is {py[0]}.{py[1]}: "
            "pass --python /path/to/python3.12 (or newer), or use --django 5.2"
        )
    return requested


def venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def venv_bin(venv: Path) -> Path:
    return venv_python(venv).parent


def python_works(python: Path) -> bool:
    if not python.exists():
        return False
    result = subprocess.run([str(python), "-c", "import sys"], capture_output=True, check=False)
    return result.returncode == 0


def setup_fingerprint(django: str, py: tuple[int, int]) -> str:
    digest = hashlib.sha256()
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(f"|{RECIPE_VERSION}|{DJANGO_PINS[django]}|{py}".encode())
    return digest.hexdigest()


def read_marker(venv: Path) -> dict[str, object]:
    try:
        data = json.loads((venv / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", *args]
    result = subprocess.run(cmd, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise DevError(f"pip failed (exit {result.returncode}): {' '.join(cmd)}")


def ensure_venv(
    venv: Path, base_python: str, py: tuple[int, int], django: str, need_pgserver: bool
) -> Path:
    python = venv_python(venv)
    fingerprint = setup_fingerprint(django, py)
    marker = read_marker(venv)

    if venv.exists() and not python_works(python):
        say(f"virtualenv {venv.name} is broken; recreating it")
        shutil.rmtree(venv)
        marker = {}
    if marker.get("fingerprint") == fingerprint and (marker.get("pgserver") or not need_pgserver):
        say(f"reusing {venv.name} (up to date)")
        return python

    started = time.monotonic()
    if not python.exists():
        say(f"creating virtualenv {venv.name} with Python {py[0]}.{py[1]}")
        result = subprocess.run([base_python, "-m", "venv", str(venv)], check=False)
        if result.returncode != 0:
            raise DevError(f"could not create the virtualenv {venv} with {base_python}")
        marker = {}

    if marker.get("fingerprint") == fingerprint:
        say("installing the embedded PostgreSQL (pgserver)")
        pip(python, "install", "-q", PGSERVER_PIN)
    else:
        extras = "dev,django52" if django == "5.2" else "dev"
        packages = [f".[{extras}]", DJANGO_PINS[django]]
        if need_pgserver:
            packages.append(PGSERVER_PIN)
        say("upgrading pip")
        pip(python, "install", "-q", "--upgrade", "pip")
        say(f"installing the project with {DJANGO_PINS[django]} (this takes a minute)")
        pip(python, "install", "-q", "-e", *packages)

    marker = {
        "fingerprint": fingerprint,
        "pgserver": bool(need_pgserver or marker.get("pgserver")),
        "django": django,
        "python": f"{py[0]}.{py[1]}",
    }
    (venv / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")
    say(f"virtualenv ready in {time.monotonic() - started:.0f}s")
    return python


def test_passes(args: list[str], processes: int) -> list[list[str]]:
    """The pytest argument lists of ``dev.py test``, run one after the other.

    Given arguments run as given, in one pass. The whole suite (no arguments) runs
    in two: most tests on ``processes`` pytest-xdist workers, each with its own test
    database (a file's tests stay on one worker: module fixtures are built once),
    then the tests marked ``serial`` in tests/conftest.py (they kill or restart
    clusters, count sessions across databases or measure timings) alone.
    """
    if args or processes <= 1:
        return [args]
    return [
        ["-n", str(processes), "--dist", "loadfile", "-m", "not serial"],
        ["-p", "no:xdist", "-m", "serial"],
    ]


def test_processes() -> int:
    raw = os.environ.get("PGQUEUE_TEST_PROCESSES", str(DEFAULT_TEST_PROCESSES))
    try:
        value = int(raw)
    except ValueError:
        raise DevError(f"PGQUEUE_TEST_PROCESSES must be a whole number, got {raw!r}") from None
    if value < 1:
        raise DevError(f"PGQUEUE_TEST_PROCESSES must be 1 or more, got {value}")
    return value


def build_commands(opts: Options, python: Path) -> list[list[str]]:
    """The with_db.py invocations for a subcommand, run one after the other."""
    runner = [str(python), str(WITH_DB)]
    manage = [str(python), "manage.py"]
    if opts.command == "demo":
        return [[*runner, "--migrate", "--", *manage, "pgqueue_demo", *opts.args]]
    if opts.command == "serve":
        return [[*runner, "--migrate", "--", *manage, "pgqueue_demo_server", *opts.args]]
    if opts.command == "test":
        return [
            [*runner, "--", str(python), "-m", "pytest", *args]
            for args in test_passes(opts.args, test_processes())
        ]
    return [[*runner, "--", *opts.args]]


#: Commands that start many Python processes from this checkout: the suite's worker,
#: server and project subprocesses, the demo's workers.
BYTECODE_COMMANDS = ("test", "demo", "serve")
BYTECODE_DIRS = ("django_pgqueue", "testproject", "tests")


def compile_bytecode(python: Path, env: dict[str, str]) -> None:
    """Write the checkout's bytecode once, up front.

    Under ``PYTHONDONTWRITEBYTECODE`` (set on some machines and CI images) Python
    never caches it, so every worker subprocess compiles the whole package from
    source again: 0.15 s more per start-up. It still reads a cache that exists.
    Files already up to date are skipped; a failure only costs that time."""
    subprocess.run(
        [str(python), "-m", "compileall", "-q", "-j", "0", *BYTECODE_DIRS],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run a child in the foreground; Ctrl-C reaches it directly, SIGTERM is forwarded."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, forward)
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    # Killed by a signal: report it the way shells do (128 + signal number).
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    base_python, py = resolve_python(opts.python)
    django = choose_django(opts.django, py)

    use_embedded = not os.environ.get("DATABASE_URL")
    if use_embedded and py not in PGSERVER_PYTHONS:
        supported = ", ".join(f"{major}.{minor}" for major, minor in sorted(PGSERVER_PYTHONS))
        raise DevError(
            f"DATABASE_URL is not set and the embedded PostgreSQL (pgserver) only exists for "
            f"Python {supported}, not {py[0]}.{py[1]}. Set DATABASE_URL, e.g. "
            "DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_demo, "
            "or pass --python with a 3.11/3.12 interpreter."
        )

    if opts.venv:
        venv = Path(opts.venv).expanduser()
        venv = venv if venv.is_absolute() else Path.cwd() / venv
    else:
        venv = ROOT / f".venv-py{py[0]}.{py[1]}-dj{django}"
    say(f"Python {py[0]}.{py[1]} ({base_python}), {DJANGO_PINS[django]}, venv {venv}")
    python = ensure_venv(venv, base_python, py, django, use_embedded)

    env = dict(os.environ)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv_bin(venv)), env.get("PATH", "")])
    env.pop("PYTHONHOME", None)
    env.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    env["PYTHONUNBUFFERED"] = "1"

    started = time.monotonic()
    if opts.command in BYTECODE_COMMANDS:
        compile_bytecode(python, env)
    code = 0
    for cmd in build_commands(opts, python):
        code = run_child(cmd, env) or code
    elapsed = time.monotonic() - started
    if opts.command == "test":
        total = f"total time {elapsed // 60:.0f} min {elapsed % 60:.0f} s"
        if code == 0:
            say(f"tests passed ({total})")
        elif code == PYTEST_NO_TESTS:
            say(f"pytest collected no tests (exit 5): counted as a failure ({total})")
        else:
            say(f"tests failed with exit code {code} ({total})")
    elif code != 0:
        say(f"`{opts.command}` exited with code {code}")
    return code


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DevError as exc:
        print(f"dev.py: error: {exc}", file=sys.stderr)
        sys.exit(2)

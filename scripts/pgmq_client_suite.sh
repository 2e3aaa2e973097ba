#!/usr/bin/env bash
# pgmq's own Python client suite (tembo-pgmq-python 0.10.0) against our pgmq-compatible SQL
# API, in the database of $DATABASE_URL. Run it through the dev environment:
#   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_ci \
#     python3 scripts/dev.py shell -- bash scripts/pgmq_client_suite.sh
# The suite is read from the peer directory (PGMQ_PEER_DIR), never copied into the project;
# the client goes into its own virtualenv (PGMQ_CLIENT_VENV), not the project's.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peer=${PGMQ_PEER_DIR:-$(cd "$here/.." && pwd)/shared/bench-peers/pgmq}
venv=${PGMQ_CLIENT_VENV:-${TMPDIR:-/tmp}/pgqueue-pgmq-client}
[[ -f $peer/client-tests/run.sh ]] || { echo "no pgmq client suite in $peer" >&2; exit 1; }
cd "$here"
python manage.py migrate --no-input -v 0
python manage.py pgqueue_install_sql_api --schema pgmq
[[ -x $venv/bin/python ]] || python -m venv "$venv"
"$venv/bin/python" -m pip install -q "tembo-pgmq-python==0.10.0" pytest
db=$(python -c "import os, urllib.parse as u; print(u.urlsplit(os.environ['DATABASE_URL']).path[1:])")
bash "$peer/client-tests/run.sh" "$db" "$venv/bin/python"

#!/usr/bin/env bash
# pgmq clients against our pgmq-compatible SQL API, in the database of $DATABASE_URL:
#   1. pgmq's own Python client suite (tembo-pgmq-python 0.10.0), read from the peer
#      directory (PGMQ_PEER_DIR), never copied into the project;
#   2. the official Python client pgmq 1.1.4 (PyPI), which ships no tests: driven by
#      scripts/pgmq_clients/test_pgmq_python.py, sync and async;
#   3. pgmq-js 1.3.1 (npm), which ships no tests either: scripts/pgmq_clients/pgmq_js.test.cjs.
# Each client goes into its own environment (PGMQ_CLIENT_VENV, PGMQ_PY_VENV, PGMQ_JS_DIR),
# not the project's. Run it through the dev environment:
#   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_ci \
#     python3 scripts/dev.py shell -- bash scripts/pgmq_client_suite.sh
# It ends with one line of pass counts per client.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peer=${PGMQ_PEER_DIR:-$(cd "$here/.." && pwd)/shared/bench-peers/pgmq}
venv=${PGMQ_CLIENT_VENV:-${TMPDIR:-/tmp}/pgqueue-pgmq-client}
py_venv=${PGMQ_PY_VENV:-${TMPDIR:-/tmp}/pgqueue-pgmq-py}
js_dir=${PGMQ_JS_DIR:-${TMPDIR:-/tmp}/pgqueue-pgmq-js}
[[ -f $peer/client-tests/run.sh ]] || { echo "no pgmq client suite in $peer" >&2; exit 1; }
cd "$here"
python manage.py migrate --no-input -v 0
python manage.py pgqueue_install_sql_api --schema pgmq
db=$(python -c "import os, urllib.parse as u; print(u.urlsplit(os.environ['DATABASE_URL']).path[1:])")
log=$(mktemp -d)
summary=()

# The last "N passed" line of a client's output, or "failed" (and the whole log).
tally() {
  local name=$1 out=$2 rc=$3 counts
  counts=$(grep -E "$4" "$out" | tail -1 || true)
  summary+=("$name: ${counts:-no result} (exit $rc)")
  [[ $rc -eq 0 ]] || { cat "$out" >&2; return 1; }
}

[[ -x $venv/bin/python ]] || python -m venv "$venv"
"$venv/bin/python" -m pip install -q "tembo-pgmq-python==0.10.0" pytest
rc=0; bash "$peer/client-tests/run.sh" "$db" "$venv/bin/python" >"$log/tembo" 2>&1 || rc=$?
tally "tembo-pgmq-python 0.10.0 (its own suite)" "$log/tembo" $rc "passed|failed" || failed=1

[[ -x $py_venv/bin/python ]] || python -m venv "$py_venv"
"$py_venv/bin/python" -m pip install -q "pgmq[async]==1.1.4" pytest
rc=0
# -c /dev/null: the client's run, not the project's pytest settings.
(cd "$here/scripts/pgmq_clients" && PG_DATABASE=$db "$py_venv/bin/python" -m pytest -q \
  -p no:cacheprovider -c /dev/null test_pgmq_python.py) >"$log/pgmq" 2>&1 || rc=$?
tally "pgmq 1.1.4 (client-driven)" "$log/pgmq" $rc "passed|failed" || failed=1

mkdir -p "$js_dir"
[[ -f $js_dir/package.json ]] || (cd "$js_dir" && npm init -y >/dev/null)
(cd "$js_dir" && npm install --no-audit --no-fund -s pgmq-js@1.3.1)
cp "$here/scripts/pgmq_clients/pgmq_js.test.cjs" "$js_dir/"
rc=0; (cd "$js_dir" && PG_DATABASE=$db node --test pgmq_js.test.cjs) >"$log/js" 2>&1 || rc=$?
tally "pgmq-js 1.3.1 (client-driven)" "$log/js" $rc "^# (pass|fail) " || failed=1
if [[ $rc -eq 0 ]]; then
  summary[-1]="pgmq-js 1.3.1 (client-driven): $(grep -E '^# pass ' "$log/js" | cut -c3-), $(grep -E '^# fail ' "$log/js" | cut -c3-) (exit 0)"
fi

printf '%s\n' "${summary[@]}"
[[ -z ${failed:-} ]]

#!/usr/bin/env bash
# Write the admin screenshots that docs/admin.md shows (docs/images/*.png) from the
# browser tests, in headless Chromium. Needs /usr/bin/chromium (.ci/run installs it)
# and a PostgreSQL in DATABASE_URL (else the embedded one).
#
#   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_shots scripts/screenshots.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PGQUEUE_UPDATE_SCREENSHOTS=1 python3 scripts/dev.py test \
  tests/admin/test_browser.py::test_replay_a_dead_job_from_the_dlq_in_a_browser \
  "tests/admin/test_browser_console.py::test_the_dashboard_charts_fit_and_pass_axe[1440]" \
  -q -p no:randomly
ls -l docs/images/admin-*.png

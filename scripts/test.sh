#!/usr/bin/env bash
# The test suite (about a few minutes on 2 CPU cores). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 "$@"

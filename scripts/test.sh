#!/usr/bin/env bash
# The checks CI runs: ruff (lint), mypy (types of src/, configured in pyproject.toml; < 1 min), then
# the test suite (about a few minutes on 2 CPU cores). Extra arguments go to pytest.
# The HTML report is tested in Debian's chromium; when it is missing and we may install system
# packages (root with apt-get), it is installed first, unless ATTNLAB_NO_APT=1. Without it the
# browser tests skip, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${ATTNLAB_NO_APT:-0}" != 1 ] && ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null; then
    echo "installing chromium for the HTML report's browser tests (set ATTNLAB_NO_APT=1 to skip)"
    { apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; } \
        || echo "could not install chromium: the browser tests will skip"
fi
# Test this checkout's code even where .venv is another checkout's (a clone beside the main tree,
# sharing its environment, whose editable install points at the other src/).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest -n 2 "$@"

#!/usr/bin/env bash
# Create .venv if missing and install attnlab (editable) with its dev tools.
# torch is pinned by constraints-dev.txt to the CPU build; re-runs are no-ops until
# pyproject.toml or constraints-dev.txt change.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
# A .venv without a working pip (its creation was interrupted) is made again.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  "$python" -m venv --clear .venv
fi
stamp=.venv/.attnlab-installed
wanted=$(cat pyproject.toml constraints-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-dev.txt -e ".[dev]"
  echo "$wanted" > "$stamp"
fi

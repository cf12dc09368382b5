#!/usr/bin/env bash
# The main job: set up the environment, train the extrapolating Shift Attender model (configs/demo.yaml)
# on generated Reversed Lookup Tables,
# print seqAcc / seqAccBE / attnLoss on the interpolation and long 1-5 test sets, and plot the
# attention of one long-1 example. Extra arguments are config overrides (key=value).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
run_dir=${RUN_DIR:-runs/demo}
.venv/bin/attnlab train demo --run-dir "$run_dir" --overwrite "$@"
echo "plots of the attention of long1 example 0 and the training curves:"
.venv/bin/attnlab plot "$run_dir" --test-set long1 --index 0

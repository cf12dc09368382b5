#!/usr/bin/env bash
# What a longer epoch budget buys: train one run in stages by exact resume and keep the run's own
# evaluation (its config's checkpoint, e.g. best.pt by validation loss so far) after each stage in
# RUN/eval_at/epochN/, so one run shows what every budget N would have given.
#
#   bash scripts/epoch_budget.sh RUN "10 15 20 30 50" scan_transformer data.split=length ...
#
# RUN is the run directory, then the epoch budgets in increasing order, then the config and
# overrides of `attnlab train` (without training.epochs or --run-dir). A stage already in
# eval_at/ is skipped (it keeps the evaluation's records and predictions), so the script can be started again after an interruption. A run with
# training.ema_decay evaluates its averaged weights; its trained weights go to eval_at/epochN/trained/.
set -euo pipefail
run=${1:?usage: epoch_budget.sh RUN "N1 N2 ..." CONFIG [key=value ...]}
budgets=${2:?usage: epoch_budget.sh RUN "N1 N2 ..." CONFIG [key=value ...]}
shift 2
cd "$(dirname "$0")/.."
attnlab=${ATTNLAB:-.venv/bin/attnlab}  # the attnlab command (default: the README's environment)
for n in $budgets; do
    [ -d "$run/eval_at/epoch$n" ] && continue
    if [ -f "$run/config.yaml" ]; then
        "$attnlab" train "$run/config.yaml" --run-dir "$run" --resume "training.epochs=$n"
    else
        "$attnlab" train "$@" "training.epochs=$n" --run-dir "$run"
    fi
    rm -rf "$run/eval_at/epoch$n.tmp"
    mkdir -p "$run/eval_at/epoch$n.tmp" && cp "$run"/eval/*.json "$run/eval_at/epoch$n.tmp/"
    for predictions in "$run"/eval/*.tsv; do  # none for experiments that write no predictions
        if [ -f "$predictions" ]; then cp "$predictions" "$run/eval_at/epoch$n.tmp/"; fi
    done
    if [ -f "$run/checkpoints/trained.pt" ]; then  # training.ema_decay: the trained weights too
        "$attnlab" evaluate "$run" --checkpoint trained --out "$run/eval_at/epoch$n.tmp/trained"
    fi
    mv "$run/eval_at/epoch$n.tmp" "$run/eval_at/epoch$n"
    echo "$(date "+%F %T") budget $n: $(tr -d " \n" <"$run/eval_at/epoch$n/summary.json")"
done

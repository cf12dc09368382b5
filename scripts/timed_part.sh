#!/usr/bin/env bash
# Train one part of `attnlab reproduce location_transformer` on a borrowed many-core machine until a
# deadline, then pack the runs that finished, to be unpacked into the campaign's tree at home:
#
#   bash scripts/timed_part.sh SECONDS CPU_JOBS CUDA_RUNS PART PACK_DIR [SEED0_CHECKPOINTS]
#   # at home:  cat PACK_DIR/runs.tgz.* | tar xz -C /work/runs/transformer28
#
# CPU_JOBS runs train on the CPU (one thread each, CUDA hidden) under one recipe process; CUDA_RUNS
# more recipe processes (one run at a time each) train on the GPU when one is there. All of them
# share the part's sweep through its run locks, so no run is trained twice. At SECONDS every process
# is killed; runs that did not finish are dropped (they are retrained at home). Runs already finished
# in the tree when the script starts (a copy of home's finished runs, so that they are not trained
# again) are not packed. Finished runs travel
# without checkpoints/last.pt; seed 0's checkpoints/best.pt travels where the run got an example
# of the headline test set wrong (what `--failure-plots` plots) when SEED0_CHECKPOINTS is 1 (the
# default) and the pack stays within 60 MB. The pack is split into 15 MB pieces (the device tool
# returns files of at most 16 MiB, 64 MiB in all). The attnlab command: $ATTNLAB, else
# .venv/bin/attnlab, else python3 with src/ on its path (a machine whose python3 holds the
# dependencies). TIMED_PART_TREE is where the runs train (default /tmp/timed_part_tree).
set -u
seconds=${1:?usage: timed_part.sh SECONDS CPU_JOBS CUDA_RUNS PART PACK_DIR [SEED0_CHECKPOINTS]}
cpu_jobs=${2:?} cuda_runs=${3:?} part=${4:?} pack=${5:?} seed0_checkpoints=${6:-1}
cd "$(dirname "$0")/.." || exit 1
tree=${TIMED_PART_TREE:-/tmp/timed_part_tree}
logs=$tree/timed_part_logs  # packed with the runs
mkdir -p "$tree" "$logs" "$pack"
started=$logs/started  # runs whose eval/summary.json is newer finished during this call
touch "$started"
if [ -n "${ATTNLAB:-}" ]; then
    attnlab=("$ATTNLAB")
elif [ -x .venv/bin/attnlab ]; then
    attnlab=(.venv/bin/attnlab)
else
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
    attnlab=(python3 -c 'import sys; from attnlab.cli import main; sys.exit(main())')
fi
# Workers are forked: check for CUDA through NVML so that no CUDA context exists before the fork.
export OMP_NUM_THREADS=1 PYTORCH_NVML_BASED_CUDA_CHECK=1
groups=()
CUDA_VISIBLE_DEVICES="" setsid "${attnlab[@]}" reproduce location_transformer --out "$tree" \
    --parts "$part" --jobs "$cpu_jobs" >"$logs/cpu.log" 2>&1 &
groups+=($!)
for ((i = 0; i < cuda_runs; i++)); do
    sleep 5  # start each one on a different run
    setsid "${attnlab[@]}" reproduce location_transformer --out "$tree" --parts "$part" \
        >"$logs/cuda$i.log" 2>&1 &
    groups+=($!)
done
sleep "$seconds"
for group in "${groups[@]}"; do kill -TERM -- "-$group" 2>/dev/null; done
sleep 3
for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null; done
wait 2>/dev/null

finished=() dropped=0
while IFS= read -r config; do
    run=$(dirname "$config")
    if [ "$run/eval/summary.json" -nt "$started" ]; then
        finished+=("${run#"$tree"/}")
    elif [ ! -f "$run/eval/summary.json" ]; then
        dropped=$((dropped + 1))
    fi
done < <(find "$tree/$part" -mindepth 3 -maxdepth 3 -name config.yaml | sort)
echo "finished runs: ${#finished[@]}; unfinished, dropped: $dropped" | tee "$logs/summary.txt"
printf '%s\n' "${finished[@]}" | tee -a "$logs/summary.txt"
excludes=(--exclude='checkpoints/last.pt' --exclude='train.lock')
# best.pt stays behind except seed 0's where it got a test example of the part's headline test set
# (Lookup long5, SCAN test) wrong: what `--failure-plots` plots
headline=$([[ $part == lookup* ]] && echo long5 || echo test)
while IFS= read -r best; do
    run=$(dirname "$(dirname "$best")")
    if [[ $run == */seed0 ]] && python3 -c 'import json, sys
summary = json.load(open(sys.argv[1]))
sys.exit(0 if summary.get(sys.argv[2], {}).get("seq_acc", 100.0) < 100.0 else 1)' \
        "$run/eval/summary.json" "$headline" 2>/dev/null; then
        continue
    fi
    excludes+=(--exclude="${best#"$tree"/}")
done < <(find "$tree/$part" -path '*/seed*/checkpoints/best.pt')
pack_runs() {
    rm -f "$pack"/runs.tgz.*
    tar czf - -C "$tree" "${excludes[@]}" "$@" "${logs#"$tree"/}" "${finished[@]}" \
        | split -b 15m - "$pack/runs.tgz."
}
pack_runs
# the device tool returns 64 MiB at most
if [ "$seed0_checkpoints" != 1 ] || [ "$(ls "$pack"/runs.tgz.* | wc -l)" -gt 4 ]; then
    pack_runs --exclude='checkpoints'
fi
ls -l "$pack"

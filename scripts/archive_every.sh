#!/usr/bin/env bash
# Keep a campaign's archive current while it runs: `attnlab archive SOURCE DESTINATION
# --unfinished-checkpoints` every SECONDS, so a machine or session lost mid-campaign loses at most
# SECONDS of training (the runs resume from the archive's checkpoints copied back into a run tree).
#
#   nohup setsid bash scripts/archive_every.sh 900 /work/runs/transformer28 results/transformer28 >/dev/null 2>&1 &
#
# Each round's output and a line with its time and exit status go to $LANES/archive_every.log
# (LANES defaults to /work/logs, as for lane.sh); a failed round is logged and the next one tried.
# ARCHIVE_ROUNDS stops it after that many rounds (default: never). The attnlab command: $ATTNLAB,
# else .venv/bin/attnlab. It sleeps first, then archives: start it beside the lanes.
set -u
seconds=${1:?usage: archive_every.sh SECONDS SOURCE DESTINATION}
source_tree=${2:?usage: archive_every.sh SECONDS SOURCE DESTINATION}
destination=${3:?usage: archive_every.sh SECONDS SOURCE DESTINATION}
cd "$(dirname "$0")/.." || exit 1
attnlab=${ATTNLAB:-.venv/bin/attnlab}
log=${LANES:-/work/logs}/archive_every.log
mkdir -p "$(dirname "$log")"
rounds=0
while [ -z "${ARCHIVE_ROUNDS:-}" ] || [ "$rounds" -lt "$ARCHIVE_ROUNDS" ]; do
    sleep "$seconds"
    OMP_NUM_THREADS=1 "$attnlab" archive "$source_tree" "$destination" --unfinished-checkpoints >>"$log" 2>&1
    status=$?  # before the date's command substitution, which sets $? itself
    echo "$(date '+%F %T') archive rc=$status $source_tree -> $destination" >>"$log"
    rounds=$((rounds + 1))
done

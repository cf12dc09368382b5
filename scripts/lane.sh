#!/usr/bin/env bash
# A campaign lane: run the commands of a queue file one at a time, one thread each.
#
#   nohup setsid bash scripts/lane.sh A >/dev/null 2>&1 &     # lane A; start lane B the same way
#   echo "attnlab reproduce raffel2015 --out /work/runs/raffel2015 ..." >> "$LANES/queue_A.txt"
#
# The queue is $LANES/queue_<lane>.txt (LANES defaults to /work/logs), one shell command a line;
# the head line is removed when it starts, and START / END lines (with the exit status) go to
# $LANES/lane_<lane>.log, the commands' output to $LANES/lane_<lane>_out.log. An empty queue is
# polled every minute, so commands can be added while the lane runs. Recipes and sweeps skip
# finished runs and resume interrupted ones, so a lane started again puts the command it was
# running when it stopped (the log's last START without an END) back at the head of its queue
# and runs it first (a REQUEUED line says so). LANE_THREADS sets OMP_NUM_THREADS
# (default 1: on a 2-core machine, two lanes at most). Both lanes may queue the same sweep or recipe:
# each run is locked while it trains, so the lanes share its runs.
set -u
lane=${1:?usage: lane.sh LANE}
dir=${LANES:-/work/logs}
queue=$dir/queue_$lane.txt log=$dir/lane_$lane.log out=$dir/lane_${lane}_out.log
cd "$(dirname "$0")/.." || exit 1
# shellcheck disable=SC1091
source .venv/bin/activate
export OMP_NUM_THREADS=${LANE_THREADS:-1}
mkdir -p "$dir" && touch "$queue" "$log"
last=$(grep -E '^[0-9-]+ [0-9:]+ (START|END) ' "$log" | tail -n 1)
if [[ $last == *" START "* ]]; then
    unfinished=${last#* START }
    { echo "$unfinished"; cat "$queue"; } >"$queue.tmp" && mv "$queue.tmp" "$queue"
    echo "$(date '+%F %T') REQUEUED $unfinished" >>"$log"
fi
while true; do
    command=$(head -n 1 "$queue")
    if [ -z "$command" ]; then
        sed -i '1{/^$/d}' "$queue"
        sleep 60
        continue
    fi
    sed -i '1d' "$queue"
    echo "$(date '+%F %T') START $command" >>"$log"
    bash -c "$command" >>"$out" 2>&1
    status=$?  # before the date's command substitution, which sets $? itself
    echo "$(date '+%F %T') END rc=$status $command" >>"$log"
done

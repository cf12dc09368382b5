#!/usr/bin/env bash
# A campaign lane: run the commands of a queue file one at a time, one thread each.
#
#   nohup setsid bash scripts/lane.sh A >/dev/null 2>&1 &     # lane A; start lane B the same way
#   echo "attnlab reproduce raffel2015 --out /work/runs/raffel2015 ..." >> "$LANES/queue_A.txt"
#   nohup setsid bash scripts/lane.sh A --preempt "COMMAND" >/dev/null 2>&1 &   # run COMMAND next, now
#
# The queue is $LANES/queue_<lane>.txt (LANES defaults to /work/logs), one shell command a line;
# the head line is removed when it starts, and START / END lines (with the exit status) go to
# $LANES/lane_<lane>.log, the commands' output to $LANES/lane_<lane>_out.log. An empty queue is
# polled every minute, so commands can be added while the lane runs. Recipes and sweeps skip
# finished runs and resume interrupted ones, so a lane started again puts the command it was
# running when it stopped (the log's last START without an END) back at the head of its queue
# and runs it first (a REQUEUED line says so); an `attnlab train ... --run-dir DIR` whose DIR holds
# a run (its checkpoints/last.pt) is requeued with --resume, which `attnlab train` needs to go on
# with it. LANE_THREADS sets OMP_NUM_THREADS (default 1: on a 2-core machine, two lanes at most).
# Both lanes may queue the same sweep or recipe: each run is locked while it trains, so the lanes
# share its runs.
# A lane already running is not started twice (lane_<lane>.lock). --preempt COMMAND stops the
# lane's running instance (its process group: start lanes with setsid) and takes its place, with
# COMMAND at the head of the queue before the command it stopped (a PREEMPTED line says so); a
# lane that is not running just starts with COMMAND first.
set -u
lane=${1:?usage: lane.sh LANE [--preempt COMMAND]}
first=
if [ $# -gt 1 ]; then
    [ "$2" = --preempt ] && [ -n "${3:-}" ] || { echo "usage: lane.sh LANE [--preempt COMMAND]" >&2; exit 2; }
    first=$3
fi
dir=${LANES:-/work/logs}
queue=$dir/queue_$lane.txt log=$dir/lane_$lane.log out=$dir/lane_${lane}_out.log
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$dir" && touch "$queue" "$log"
# One instance per lane: it holds an flock on $LANES/lane_<lane>.lock, which names its process group.
lock=$dir/lane_$lane.lock
exec 9>>"$lock"
if ! flock -n 9; then
    group=$(cat "$lock")
    if [ -z "$first" ]; then
        echo "lane $lane is already running (process group $group); to run a command next, now: --preempt" >&2
        exit 1
    fi
    kill -TERM -- "-$group" 2>/dev/null
    flock 9
    # until every process of that group has exited (zombies left to their parent to reap count as gone)
    while ps -e -o pgid=,stat= | awk -v group="$group" '$1 == group && $2 !~ /^Z/ { found = 1 } END { exit !found }'; do
        sleep 1
    done
    echo "$(date '+%F %T') PREEMPTED by $first" >>"$log"
fi
ps -o pgid= $$ | tr -d ' ' >"$lock"
# shellcheck disable=SC1091
source .venv/bin/activate
export OMP_NUM_THREADS=${LANE_THREADS:-1}
last=$(grep -E '^[0-9-]+ [0-9:]+ (START|END) ' "$log" | tail -n 1)
if [[ $last == *" START "* ]]; then
    unfinished=${last#* START }
    # `attnlab train` refuses a run directory that holds a run unless told to resume it; only a
    # command that ends with its `attnlab train` gets --resume (at the end)
    training=${unfinished##*attnlab train }
    if [[ $unfinished == *"attnlab train "* && $training != *[\;\&\|]* && $training != *" --resume"* \
        && $training =~ --run-dir[[:space:]]+([^[:space:]]+) && -f ${BASH_REMATCH[1]}/checkpoints/last.pt ]]; then
        unfinished="$unfinished --resume"
    fi
    { echo "$unfinished"; cat "$queue"; } >"$queue.tmp" && mv "$queue.tmp" "$queue"
    echo "$(date '+%F %T') REQUEUED $unfinished" >>"$log"
fi
if [ -n "$first" ]; then
    { echo "$first"; cat "$queue"; } >"$queue.tmp" && mv "$queue.tmp" "$queue"
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
    bash -c "$command" >>"$out" 2>&1 9>&-
    status=$?  # before the date's command substitution, which sets $? itself
    echo "$(date '+%F %T') END rc=$status $command" >>"$log"
done

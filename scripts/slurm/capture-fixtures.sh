#!/usr/bin/env bash
# capture-fixtures.sh -- regenerate tests/executors/fixtures/slurm/ from the fake cluster.
#
# Provokes, on the running cluster of start-fake-cluster.sh, every job and node state the
# parsers in src/jpushare/executors/slurm_parse.py must read, and saves what sinfo, squeue
# and sbatch print (text, with the parsers' format strings). Takes about
# 2 minutes (the TIMEOUT job needs its 1-minute limit plus Slurm's slack). Root, as the
# start script. Leaves the cluster as it found it: all nodes resumed, its jobs cancelled.
#
#   sudo scripts/slurm/start-fake-cluster.sh && sudo scripts/slurm/capture-fixtures.sh
#
# Job names: `jps-cap-<what>-1` (what JPU-Share's SlurmExecutor would name job
# `cap-<what>`, attempt 1) and `foreign-train` (a job JPU-Share did not submit).
# Commands run with TZ=UTC0 SLURM_TIME_FORMAT=standard, as the executor runs them;
# `squeue-ended-seoul.txt` is the same listing printed in Asia/Seoul time.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$HERE/../../tests/executors/fixtures/slurm}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
R=${FAKE_SLURM_ROOT:-/var/lib/slurm-fake}
# shellcheck disable=SC1091
. "$R/cluster.env"
export TZ=UTC0 SLURM_TIME_FORMAT=standard
# The same format strings as slurm_parse.SINFO_FORMAT / SQUEUE_FORMAT (a test checks).
SINFO_FORMAT='NodeList:|,Partition:|,Gres:|,GresUsed:|,StateLong:|,Reason:'
SQUEUE_FORMAT='JobID:|,State:|,Reason:|,NodeList:|,Partition:|,SubmitTime:|,StartTime:|,EndTime:|,exit_code:|,tres-per-node:|,UserName:|,Name:'
LOGS=$(mktemp -d /tmp/jps-capture.XXXXXX)
chmod 0777 "$LOGS"
IDS=()

log() { echo "[capture $(date +%T)] $*" >&2; }
restore() {
  for n in node-a node-b node-c node-d; do
    scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
  done
  [ ${#IDS[@]} -gt 0 ] && scancel "${IDS[@]}" >/dev/null 2>&1 || true
}
trap restore EXIT

sub() {  # name, sbatch args..., script on stdin -> job id (callers add it to IDS)
  local name=$1; shift
  local id
  sbatch --parsable -J "$name" -o "$LOGS/$name.out" "$@"
}
state() { squeue -h -t all -j "$1" -o %T 2>/dev/null; }
reason() { squeue -h -t all -j "$1" -o %r 2>/dev/null; }
wait_state() {  # id regex seconds
  local end=$(( $(date +%s) + $3 ))
  until state "$1" | grep -qE "^($2)$"; do
    [ "$(date +%s)" -ge "$end" ] && { log "job $1 is $(state "$1"), wanted $2"; return 1; }
    sleep 0.2
  done
}
snap_nodes() {  # suffix
  sinfo -h -N -O "$SINFO_FORMAT" > "$OUT/sinfo-$1.txt"
}
snap_jobs() {  # suffix
  squeue -h -t all -j "$(IFS=,; echo "${IDS[*]}")" -O "$SQUEUE_FORMAT" > "$OUT/squeue-$1.txt"
}

log "idle cluster"
snap_nodes idle

log "sbatch answers"
printf '#!/bin/bash\ntrue\n' | sbatch -J jps-cap-plain-1 -o /dev/null -p gpu -w node-a \
  --gres=gpu:rtx4090:1 > "$OUT/sbatch-submitted.txt"
IDS+=("$(sed 's/[^0-9]//g' "$OUT/sbatch-submitted.txt")")
printf '#!/bin/bash\ntrue\n' | sbatch --parsable -J jps-cap-parsable-1 -o /dev/null -p gpu \
  -w node-a --gres=gpu:rtx4090:1 > "$OUT/sbatch-parsable.txt"
IDS+=("$(cat "$OUT/sbatch-parsable.txt")")
refuse() {  # fixture name, sbatch args...
  local f=$1; shift
  if printf '#!/bin/bash\ntrue\n' | sbatch "$@" -o /dev/null 2> "$OUT/sbatch-refused-$f.txt"; then
    log "sbatch $* was accepted"; exit 1
  fi
}
refuse gres-type -J jps-cap-refused-1 -p gpu -w node-a --gres=gpu:nosuch:1
refuse too-many -J jps-cap-refused-2 -p gpu -w node-a --gres=gpu:rtx4090:3
refuse partition -J jps-cap-refused-3 -p nosuch -w node-a --gres=gpu:rtx4090:1
refuse node -J jps-cap-refused-4 -p gpu -w node-zz --gres=gpu:rtx4090:1
# the refused jobs still got ids (FAILED BadConstraints): keep them in the listings
for id in $(squeue -h -t all -o '%i %j' | awk '$2 ~ /^jps-cap-refused-/ {print $1}'); do IDS+=("$id"); done

log "jobs that end at once"
C=$(sub jps-cap-completed-1 -p gpu -w node-b --gres=gpu:rtx5090:1 <<<$'#!/bin/bash\necho done')
X=$(sub jps-cap-exit3-1 -p legacy -w node-d --gres=gpu:rtx3080ti:1 <<<$'#!/bin/bash\nexit 3')
K=$(sub jps-cap-killed-1 -p gpu -w node-c --gres=gpu:rtx4090:1 <<<$'#!/bin/bash\nkill -9 $$')
G=$(sub jps-cap-cudaoom-1 -p gpu -w node-c --gres=gpu:rtx5090:1 <<<$'#!/bin/bash
echo "epoch 1"
echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.99 GiB" >&2
exit 1')
M=$(sub jps-cap-oom-1 -p gpu -w node-b --gres=gpu:rtx5090:1 --mem=100M <<<$'#!/bin/bash
python3 -c "import time; a = b\\"x\\" * (600 << 20); time.sleep(30)"')
IDS+=("$C" "$X" "$K" "$G" "$M")
for j in "$C" "$X" "$K" "$G"; do wait_state "$j" 'COMPLETED|FAILED' 30; done
wait_state "$M" 'OUT_OF_MEMORY|FAILED' 40

log "running, pending, foreign, time limit"
T=$(sub jps-cap-timeout-1 -p gpu -w node-b --gres=gpu:rtx5090:1 -t 1 <<<$'#!/bin/bash\nsleep 600')
RUN=$(sub jps-cap-running-1 -p gpu -w node-a --gres=gpu:rtx4090:2 <<<$'#!/bin/bash
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS=$SLURM_JOB_GPUS NODE=$SLURMD_NODENAME"
sleep 600')
P=$(sub jps-cap-pending-1 -p gpu -w node-a --gres=gpu:rtx4090:1 <<<$'#!/bin/bash\nsleep 600')
F=$(sub foreign-train -p gpu -w node-c --gres=gpu:rtx5090:2 <<<$'#!/bin/bash\nsleep 600')
R2=$(sub jps-cap-mixed-1 -p gpu -w node-c --gres=gpu:rtx4090:1 <<<$'#!/bin/bash\nsleep 600')
Q=$(sub jps-cap-cancelled-1 -p gpu -w node-c --gres=gpu:rtx4090:1 <<<$'#!/bin/bash\nsleep 600')
NF=$(sub jps-cap-nodefail-1 -p legacy -w node-d --gres=gpu:rtx3080ti:1 --no-requeue <<<$'#!/bin/bash\nsleep 600')
RQ=$(sub jps-cap-requeued-1 -p legacy -w node-d --gres=gpu:rtx3080ti:1 --requeue <<<$'#!/bin/bash\nsleep 600')
IDS+=("$T" "$RUN" "$P" "$F" "$R2" "$Q" "$NF" "$RQ")
for j in "$T" "$RUN" "$F" "$R2" "$Q" "$NF" "$RQ"; do wait_state "$j" RUNNING 30; done
for _ in $(seq 50); do [ "$(reason "$P")" = Resources ] && break; sleep 0.2; done
cp "$LOGS/jps-cap-running-1.out" "$OUT/log-running.out"
cp "$LOGS/jps-cap-cudaoom-1.out" "$OUT/log-cudaoom.out"
cp "$LOGS/jps-cap-oom-1.out" "$OUT/log-oom.out"

log "cancel one, node-d fails under two jobs, node-b drains under one"
scancel "$Q"; wait_state "$Q" CANCELLED 20
scontrol update nodename=node-d state=down reason="capture: node failure"
scontrol update nodename=node-b state=drain reason="capture: maintenance"
wait_state "$NF" NODE_FAIL 20
wait_state "$RQ" PENDING 20
sleep 1
snap_nodes busy
snap_jobs busy

log "waiting for the time limit (up to ~100 s)"
wait_state "$T" TIMEOUT 150
sleep 1
snap_nodes drained
scancel "$P"; wait_state "$P" CANCELLED 20
snap_jobs ended
TZ=Asia/Seoul squeue -h -t all -j "$(IFS=,; echo "${IDS[*]}")" -O "$SQUEUE_FORMAT" \
  > "$OUT/squeue-ended-seoul.txt"
{
  echo "# captured by scripts/slurm/capture-fixtures.sh on $(date -u +%FT%TZ)"
  echo "# $(sinfo --version) mode=$FAKE_SLURM_MODE oom_state=$FAKE_SLURM_OOM_STATE"
  for v in C X K G M T RUN P F R2 Q NF RQ; do echo "$v=${!v}"; done
} > "$OUT/jobs.env"
rm -rf "$LOGS"
log "fixtures in $OUT"

#!/usr/bin/env bash
# check-fake-cluster.sh -- exercise the fake cluster the way the JPU-Share adapter will.
# Prints one line per check and a closing "N passed, N failed"; exit 1 on any failure.
# FAKE_SLURM_CHECK_TIMEOUT=1 adds the TIMEOUT-state check (~80 s more).
# A quick way to see that the cluster behaves as start-fake-cluster.sh sets it up (~13 s)
# before blaming the executor.  The project's own checks are
# tests/executors/test_slurm_executor.py.
set -uo pipefail
R=${FAKE_SLURM_ROOT:-/var/lib/slurm-fake}
# shellcheck disable=SC1091
. "$R/cluster.env"
OUT=$R/check; mkdir -p "$OUT"
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "PASS $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
field() { scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }   # job key
state() { squeue -h -t all -j "$1" -o %T 2>/dev/null; }
wait_state() {  # job regex seconds
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    state "$1" | grep -qE "^($2)$" && return 0; sleep 0.1
  done; return 1
}
sub() { sbatch --parsable -o "$OUT/%j.out" "$@"; }

# 1. inventory: one line per (node, partition); GRES per type with used counts
inv=$(sinfo -h -N -O 'NodeList:|,Partition:|,Gres:|,GresUsed:|,StateLong:|,Reason:')
echo "$inv" | grep -q '^node-c|gpu\*|gpu:rtx4090:4,gpu:rtx5090:4|gpu:rtx4090:0(IDX:N/A),gpu:rtx5090:0(IDX:N/A)|idle|none$' \
  && [ "$(echo "$inv" | wc -l)" = 5 ] && ok "sinfo -N -O inventory (5 node/partition rows)" || bad "sinfo inventory: $inv"
sinfo --json | python3 -c '
import json,sys; d=json.load(sys.stdin); n={x["name"]:x for x in d["nodes"]}
assert sorted(n)==["node-a","node-b","node-c","node-d"], n.keys()
assert n["node-c"]["gres"]=="gpu:rtx4090:4,gpu:rtx5090:4", n["node-c"]["gres"]
assert sorted(n["node-d"]["partitions"])==["gpu","legacy"], n["node-d"]["partitions"]
' && ok "sinfo --json nodes/gres/partitions" || bad "sinfo --json"

# 2. 2-GPU jobs pinned to a node and a GPU model
t0=$(date +%s%N)
A=$(sub -J chk-a -p gpu -w node-a --gres=gpu:rtx4090:2 --wrap 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 60')
C=$(sub -J chk-c -p gpu -w node-c --gres=gpu:rtx5090:2 --wrap 'echo CVD=$CUDA_VISIBLE_DEVICES; sleep 60')
if wait_state "$A" RUNNING 20 && wait_state "$C" RUNNING 20; then
  ok "2-GPU jobs $A,$C RUNNING after $(( ($(date +%s%N)-t0)/1000000 )) ms"
else bad "jobs $A/$C not running: $(state "$A") $(state "$C")"; fi
sleep 1
used=$(sinfo -h -N -n node-a,node-c -p gpu -O 'NodeList:|,GresUsed:')
echo "$used" | grep -q '^node-a|gpu:rtx4090:2(IDX:0-1)$' && echo "$used" | grep -q 'gpu:rtx5090:2(IDX:4-5)' \
  && ok "GresUsed shows allocation: $(echo $used)" || bad "GresUsed: $used"
grep -q '^CVD=4,5$' "$OUT/$C.out" && ok "job sees CUDA_VISIBLE_DEVICES=4,5 on node-c" || bad "CVD: $(cat "$OUT/$C.out")"
[ "$(field "$C" TresPerNode)" = gres:gpu:rtx5090:2 ] && [ "$(field "$C" NodeList)" = node-c ] \
  && ok "scontrol show job -o: NodeList/TresPerNode" || bad "scontrol show job -o $C"
squeue --json | python3 -c '
import json,sys; d=json.load(sys.stdin); j={x["job_id"]:x for x in d["jobs"]}[int(sys.argv[1])]
assert j["job_state"]=="RUNNING" and j["nodes"]=="node-c" and j["gres_detail"]==["gpu:rtx5090:2(IDX:4-5)"], j
' "$C" && ok "squeue --json job_state/nodes/gres_detail" || bad "squeue --json"

# 3. no free rtx4090 left on node-a -> PENDING (Resources); scancel frees it
P=$(sub -J chk-p -p gpu -w node-a --gres=gpu:rtx4090:1 --wrap 'sleep 60')
# (Reason stays "None" until the scheduler has looked at the job: ~1-3 s)
for _ in $(seq 50); do r=$(squeue -h -j "$P" -o '%T %r'); [ "$r" != "PENDING None" ] && break; sleep 0.2; done
[ "$r" = "PENDING Resources" ] && ok "3rd job pending: $r" || bad "pending job: $r"
scancel "$A"; wait_state "$A" CANCELLED 15 && [ "$(field "$A" ExitCode)" = 0:15 ] \
  && ok "scancel -> CANCELLED ExitCode=0:15" || bad "scancel: $(state "$A") $(field "$A" ExitCode)"
wait_state "$P" RUNNING 70 && ok "pending job started after scancel" || bad "pending job still $(state "$P")"
scancel "$P" "$C"

# 4. impossible request is rejected at submit time
if e=$(sbatch -p gpu -w node-a --gres=gpu:rtx5090:1 --wrap true 2>&1); then bad "rtx5090 on node-a accepted"
else ok "rtx5090 on node-a rejected: ${e##*: }"; fi

# 5. non-zero exit, memory overrun
F=$(sub -J chk-f -p legacy -w node-d --gres=gpu:rtx3080ti:1 --wrap 'exit 3')
wait_state "$F" FAILED 15 && [ "$(field "$F" ExitCode)" = 3:0 ] && [ "$(field "$F" Reason)" = NonZeroExitCode ] \
  && ok "exit 3 -> FAILED Reason=NonZeroExitCode ExitCode=3:0" || bad "exit 3: $(state "$F") $(field "$F" ExitCode)"
M=$(sub -J chk-m -p gpu -w node-b --gres=gpu:rtx5090:1 --mem=100M \
      --wrap 'python3 -c "import time; a = b\"x\" * (600 << 20); time.sleep(30)"')
wait_state "$M" 'OUT_OF_MEMORY|FAILED' 30
ms=$(state "$M"); mx=$(field "$M" ExitCode); mr=$(field "$M" Reason)
[ "$ms" = "$FAKE_SLURM_OOM_STATE" ] && ok "600M in --mem=100M -> $ms Reason=$mr ExitCode=$mx (mode=$FAKE_SLURM_MODE)" \
  || bad "oom: $ms $mr $mx"

# 6. node DOWN / resume
B=$(sub -J chk-b -p gpu -w node-b --gres=gpu:rtx5090:2 --wrap 'sleep 60')
wait_state "$B" RUNNING 20
scontrol update nodename=node-b state=down reason="chk maintenance"
sleep 1
d=$(sinfo -h -N -n node-b -O 'NodeList:|,StateLong:|,Reason:')
[ "$d" = "node-b|down|chk maintenance" ] && ok "scontrol down -> sinfo: $d" || bad "down: $d"
wait_state "$B" 'PENDING|NODE_FAIL' 10 && ok "running job on downed node -> $(state "$B") ($(field "$B" Reason))" \
  || bad "job on down node: $(state "$B")"
scontrol update nodename=node-b state=resume; sleep 1
[ "$(sinfo -h -N -n node-b -o %t)" = idle ] || [ "$(sinfo -h -N -n node-b -o %t)" = mix ] \
  && ok "resume -> $(sinfo -h -N -n node-b -o %T)" || bad "resume: $(sinfo -h -N -n node-b -o %T)"
scancel "$B"

# 7. finished-job state without slurmdbd
sacct -j "$F" >/dev/null 2>&1 && bad "sacct unexpectedly works" || ok "sacct fails without slurmdbd (rc!=0): $(sacct 2>&1 | head -1)"
[ "$(squeue -h -t all -j "$F" -o %T)" = FAILED ] && ok "finished job still in squeue -t all (MinJobAge)" || bad "squeue -t all"
grep -q "^JobId=$F .*JobState=FAILED.*ExitCode=3:0" "$R/log/jobcomp.log" && ok "jobcomp/filetxt line for $F" || bad "jobcomp"

# 8. optional: time limit
if [ "${FAKE_SLURM_CHECK_TIMEOUT:-0}" = 1 ]; then
  T=$(sub -J chk-t -p gpu -w node-a --gres=gpu:rtx4090:1 -t 0:01:00 --wrap 'sleep 600')
  wait_state "$T" TIMEOUT 120 && ok "time limit -> TIMEOUT ExitCode=$(field "$T" ExitCode)" || bad "timeout: $(state "$T")"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]

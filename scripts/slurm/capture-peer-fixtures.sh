#!/usr/bin/env bash
# capture-peer-fixtures.sh -- regenerate tests/slurm_peer/fixtures/ from the peer cluster.
#
# Runs on the peer of `FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh` (root): the
# small trace tests/slurm_peer/fixtures/tiny-trace.csv through `jpushare slurm-peer run` at
# --speed 60 (~20 s), then saves what sacct printed for those jobs, and, while a job runs
# and another waits behind it, the same listing with Unknown start/end times. Commands run
# with TZ=UTC0 SLURM_TIME_FORMAT=standard, as the driver runs them.
#   sudo FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh && sudo scripts/slurm/capture-peer-fixtures.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/tests/slurm_peer/fixtures
export SLURM_CONF=${SLURM_CONF_PEER:-/etc/slurm-peer/slurm.conf} TZ=UTC0 SLURM_TIME_FORMAT=standard
FORMAT=$("$ROOT/.venv/bin/python" -c 'from jpushare.slurm_peer.sacct import SACCT_FORMAT; print(SACCT_FORMAT)')
RUN=$(mktemp -d /tmp/jps-peer-capture.XXXXXX)
"$ROOT/.venv/bin/jpushare" slurm-peer run --cluster "$ROOT/examples/slurm-cluster.yaml" \
  --trace "$OUT/tiny-trace.csv" --speed 60 --out "$RUN" --name-prefix cap- >/dev/null
IDS=$("$ROOT/.venv/bin/python" -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["slurm_ids"].values()))' "$RUN/peer.json")
sacct -X -n --parsable2 -o "$FORMAT" -j "$IDS" > "$OUT/sacct-ended.txt"
cp "$RUN/peer.json" "$OUT/tiny-peer.json"
# one job holds node-b's four 5090s and node-c's, a third waits for them
A=$(sbatch --parsable -J cap-running -A bcg --gres=gpu:rtx5090:4 -t 2 -o /dev/null --wrap 'sleep 30')
B=$(sbatch --parsable -J cap-running2 -A bcg --gres=gpu:rtx5090:4 -t 2 -o /dev/null --wrap 'sleep 30')
C=$(sbatch --parsable -J 'cap-pending|odd name' -A kdg --gres=gpu:rtx5090:4 -t 1 -o /dev/null --wrap 'sleep 5')
sleep 3
sacct -X -n --parsable2 -o "$FORMAT" -j "$A,$B,$C" > "$OUT/sacct-active.txt"
scancel "$A" "$B" "$C"
{
  echo "# captured by scripts/slurm/capture-peer-fixtures.sh on $(date -u +%FT%TZ)"
  echo "# $(sacct --version), cluster $(scontrol show config | sed -n 's/^ClusterName *= //p')"
  echo "# sacct -X -n --parsable2 -o $FORMAT"
  echo "running=$A,$B pending=$C"
} > "$OUT/captured.txt"
rm -rf "$RUN"
echo "fixtures in $OUT" >&2

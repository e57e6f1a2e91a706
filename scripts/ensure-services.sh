#!/usr/bin/env bash
# Bring up what the tests talk to: PostgreSQL at 127.0.0.1:5432 (database `test`), the
# fake Slurm cluster (scripts/slurm/start-fake-cluster.sh, needs root), its peer
# (FAKE_SLURM_PEER=1: Slurm's own scheduler with slurmdbd, ~5 s) and munged (the
# MUNGE sign-in tests decode real credentials; the fake cluster starts it too) and Chromium
# (the dashboard's browser tests, scripts/ensure-browser.sh) and promtool (the alert rules'
# tests, scripts/ensure-promtool.sh). With CI=true a
# missing service is an error; elsewhere it is a warning and those tests skip.
set -uo pipefail
cd "$(dirname "$0")/.."
ci=${CI:-false}
fail() { if [ "$ci" = "true" ]; then echo "error: $*" >&2; exit 1; else echo "warning: $*" >&2; fi; }

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
        for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    fi
    pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || fail "PostgreSQL is not reachable at 127.0.0.1:5432"
fi

if [ "$(id -u)" = "0" ]; then
    # A cluster started by an older start-fake-cluster.sh (its slurm.conf's marker line has
    # another config= fingerprint, e.g. no backfill partition) is restarted with this one's.
    want=$(cat scripts/slurm/start-fake-cluster.sh scripts/slurm/peer.sh 2>/dev/null | sha256sum | cut -c1-16)
    have=$(sed -n '1s/.*config=\([0-9a-f]*\).*/\1/p' /etc/slurm/slurm.conf 2>/dev/null)
    if ! sinfo -h >/dev/null 2>&1 || [ "$have" != "$want" ]; then
        sinfo -h >/dev/null 2>&1 && echo "the fake Slurm cluster runs an older configuration: restarting it" >&2
        bash scripts/slurm/start-fake-cluster.sh >/tmp/jpushare-slurm-start.log 2>&1 \
            || { tail -n 30 /tmp/jpushare-slurm-start.log >&2; fail "the fake Slurm cluster did not start"; }
    fi
    # The peer cluster (Slurm's own scheduler, slurmdbd on MariaDB) for tests/slurm_peer.
    if ! SLURM_CONF=/etc/slurm-peer/slurm.conf timeout 10 sacctmgr -n show cluster >/dev/null 2>&1 \
       || ! SLURM_CONF=/etc/slurm-peer/slurm.conf timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
        FAKE_SLURM_PEER=1 bash scripts/slurm/start-fake-cluster.sh >/tmp/jpushare-slurm-peer-start.log 2>&1 \
            || { tail -n 30 /tmp/jpushare-slurm-peer-start.log >&2; fail "the peer Slurm cluster did not start"; }
    fi
else
    sinfo -h >/dev/null 2>&1 || fail "no Slurm cluster (run: sudo scripts/slurm/start-fake-cluster.sh)"
fi
# munged answers? (Slurm may have been up already, with munged stopped since.)
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v munged >/dev/null 2>&1; then
        if [ ! -s /etc/munge/munge.key ]; then
            mkdir -p /etc/munge
            mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
                || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
        chown -R munge:munge /etc/munge; chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        chown munge:munge /run/munge /var/log/munge /var/lib/munge; chmod 0755 /run/munge
        runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 || true
        for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    fi
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 \
        || fail "munged does not answer (the MUNGE sign-in tests need it; as root this script starts it)"
fi
bash scripts/ensure-browser.sh || exit 1
bash scripts/ensure-promtool.sh || exit 1
exit 0

#!/usr/bin/env bash
# Bring up what the tests talk to: PostgreSQL at 127.0.0.1:5432 (database `test`) and the
# fake Slurm cluster (scripts/slurm/start-fake-cluster.sh, needs root). With CI=true a
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
    if ! sinfo -h >/dev/null 2>&1; then
        bash scripts/slurm/start-fake-cluster.sh >/tmp/jpushare-slurm-start.log 2>&1 \
            || { tail -n 30 /tmp/jpushare-slurm-start.log >&2; fail "the fake Slurm cluster did not start"; }
    fi
else
    sinfo -h >/dev/null 2>&1 || fail "no Slurm cluster (run: sudo scripts/slurm/start-fake-cluster.sh)"
fi
exit 0

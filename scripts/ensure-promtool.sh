#!/usr/bin/env bash
# promtool (Debian's `prometheus` package) for the alert rules' tests
# (tests/deploy/test_deploy_files.py: `promtool check rules` and `promtool test rules` on
# deploy/prometheus/). Installed with apt-get when missing and root; the package's own
# Prometheus server is not started by it here (no systemd). With CI=true a missing promtool
# is an error (the tests fail too); elsewhere a warning, and those tests skip.
set -uo pipefail
ci=${CI:-false}
command -v promtool >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    log=/tmp/jpushare-promtool-install.log
    { apt-get install -y -q --no-install-recommends prometheus \
        || { apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; }; } \
        >"$log" 2>&1 || tail -n 20 "$log" >&2
fi
if ! command -v promtool >/dev/null 2>&1; then
    msg="no promtool for the alert rules' tests (as root: apt-get install prometheus)"
    if [ "$ci" = "true" ]; then echo "error: $msg" >&2; exit 1; fi
    echo "warning: $msg" >&2
fi
exit 0

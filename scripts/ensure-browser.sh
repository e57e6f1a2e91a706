#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser tests (tests/web/test_browser.py, driven by
# the Playwright Python package, which never downloads a browser of its own here). Installed
# with apt-get when missing and root. With CI=true a missing browser is an error (the
# tests fail too); elsewhere a warning, and those tests skip.
set -uo pipefail
ci=${CI:-false}
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    log=/tmp/jpushare-chromium-install.log
    { apt-get install -y -q chromium \
        || { apt-get update -q && apt-get install -y -q chromium; }; } \
        >"$log" 2>&1 || tail -n 20 "$log" >&2
fi
if [ ! -x /usr/bin/chromium ]; then
    msg="no /usr/bin/chromium for the browser tests (as root: apt-get install chromium)"
    if [ "$ci" = "true" ]; then echo "error: $msg" >&2; exit 1; fi
    echo "warning: $msg" >&2
fi
exit 0

#!/usr/bin/env bash
# Browser tests drive Debian's Chromium through Playwright (Playwright's own browser download cannot
# work offline). Install the package when it is missing and we may (root with apt-get).
set -u
CHROMIUM="${CONCORD_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests"
  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null; }
fi
[ -x "$CHROMIUM" ] || { echo "chromium is missing at $CHROMIUM; browser tests will be skipped" >&2; exit 1; }

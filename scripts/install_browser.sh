#!/usr/bin/env bash
# Chromium for the dashboard's browser tests (tests/dashboard/test_browser.py), and nothing else:
# the platform itself needs no browser, so `make install` and `make up` never run this; `make
# test` does. Debian's package without recommends (the full install is over a hundred packages,
# systemd, avahi and cups helpers among them). Where it cannot install it (macOS, no apt-get,
# not root) it says so and carries on: the browser tests then skip, saying how to install it.
# AERO_REQUIRE_BROWSER=1 (CI) makes that an error instead, so CI never passes with them skipped.
set -uo pipefail
CHROMIUM=${AERO_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] && exit 0

cannot() {
  echo "install_browser: $1, so chromium is not installed and the browser tests will skip." >&2
  echo "  To run them: sudo apt-get install --no-install-recommends chromium (Debian/Ubuntu)," >&2
  echo "  or set AERO_CHROMIUM to a Chromium binary." >&2
  [ "${AERO_REQUIRE_BROWSER:-}" = 1 ] && exit 1
  exit 0
}

[ "$(uname -s)" = Linux ] || cannot "this is $(uname -s), not Debian"
command -v apt-get >/dev/null 2>&1 || cannot "there is no apt-get"
[ "$(id -u)" = 0 ] || cannot "installing it needs root"
echo "install_browser: installing Debian's chromium for the browser tests" >&2
DEBIAN_FRONTEND=noninteractive apt-get update -qq \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
  || cannot "apt-get install chromium failed"
[ -x "$CHROMIUM" ] || cannot "apt-get installed no $CHROMIUM"

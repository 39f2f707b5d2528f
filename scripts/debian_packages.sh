#!/usr/bin/env bash
# Install the Debian packages that qkviz's set-up needs and this machine lacks; a no-op when all are there.
#   bash scripts/debian_packages.sh            what scripts/setup.sh needs: Python's venv module (python3-venv) and
#                                               npm (plotly.js's cartesian bundle for the report pages)
#   bash scripts/debian_packages.sh --browser  also what the browser tests need: Debian's Chromium and its driver
#                                               (Playwright drives /usr/bin/chromium; its own download is never used)
# The one place that runs apt-get: scripts/setup.sh and scripts/test.sh call it, and CI through them. As root it
# runs apt-get itself, otherwise through sudo. Other systems: install the same things by hand (README, Set-up).
set -euo pipefail
PYTHON=${PYTHON:-python3}
missing=()
[ -x .venv/bin/python ] || "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v npm >/dev/null || missing+=(npm)
if [ "${1:-}" = "--browser" ]; then
    # QKVIZ_CHROMIUM names another Chromium for the tests (tests/support/browser.py); it is used as it is
    [ -x "${QKVIZ_CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium chromium-driver)
elif [ -n "${1:-}" ]; then
    echo "usage: bash scripts/debian_packages.sh [--browser]" >&2; exit 2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
    echo "qkviz needs ${missing[*]} (Debian package names); this is not a Debian system: install them by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "installing ${missing[*]} needs root (or sudo)" >&2; exit 1; }
    SUDO="sudo"
fi
echo "installing Debian packages: ${missing[*]}" >&2
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"

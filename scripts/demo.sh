#!/usr/bin/env bash
# Set up, then run qkviz on a bundled model over the bundled corpus, with the app up as early as possible:
#   bash scripts/demo.sh            MiniLM, the default
#   bash scripts/demo.sh smollm2    SmolLM2-135M (converted from its GGUF the first time)
#   bash scripts/demo.sh gemma3     Gemma 3 270M (converted the first time: 1.5-3 min, 3.4 GB of memory)
#   bash scripts/demo.sh ./my-model a Hugging Face model directory (a path with a slash; its run is named after it)
# It does this: set up .venv (scripts/setup.sh; its output goes to runs/setup.log, its step lines "qkviz set-up: [2/6]
# ... (40 s)" to the console, and a failure shows the log's last lines), extract 5,000 tokens (its progress bar on the console), serve at once (every head in PCA; the attention
# t-SNE layouts are made in the background and switch in as they land; the app shows how many are left), and
# meanwhile project the rest (sharing the heads with the server), the head atlas, related heads, the search indexes
# and the report, which the app shows as they appear. The server's output and those steps' go to runs/MODEL.log, so
# the console ends with the app's address (a failing step says so in one line, with the log's last lines, and exits
# non-zero); then the run's status and "all done", naming the address again. Ctrl-C stops it all.
# Knobs: QKVIZ_SETUP=skip (no set-up), QKVIZ_DEMO_TOKENS (5000), QKVIZ_PORT (8050), QKVIZ_DEMO_OUT (where runs/ and
# reports/ go; the checkout), QKVIZ_PYTHON (the Python with qkviz; .venv/bin/python), QKVIZ_DEMO_EXIT=1 (stop the
# app and exit once all is done: for tests).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
absolute() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$caller/$1" ;; esac; }
RUNS=runs REPORTS=reports
if [ -n "${QKVIZ_DEMO_OUT:-}" ]; then
  OUT=$(absolute "$QKVIZ_DEMO_OUT")
  RUNS=$OUT/runs REPORTS=$OUT/reports
fi
PY=.venv/bin/python
if [ -n "${QKVIZ_PYTHON:-}" ]; then
  case $QKVIZ_PYTHON in */*) PY=$(absolute "$QKVIZ_PYTHON") ;; *) PY=$QKVIZ_PYTHON ;; esac
fi
MODEL=${1:-minilm}
case $MODEL in */*) [ ! -d "$(absolute "$MODEL")" ] || MODEL=$(absolute "$MODEL") ;; esac
NAME=$(basename "$MODEL")
TOKENS=${QKVIZ_DEMO_TOKENS:-5000}
PORT=${QKVIZ_PORT:-8050}
URL=http://127.0.0.1:$PORT/
RUN=$RUNS/$NAME
LOG=$RUNS/$NAME.log
mkdir -p "$RUNS"
if [ "${QKVIZ_SETUP:-}" != skip ]; then
  bash scripts/quietly.sh --name "setting up .venv (scripts/setup.sh)" --show "qkviz set-up:" "$RUNS/setup.log" -- \
    bash scripts/setup.sh
fi
export HF_HUB_OFFLINE=1
qkviz() { "$PY" -m qkviz "$@"; }
# A later step, its output into the log; a failure names the step and shows the log's last lines (on stderr), and
# the demo exits with the step's status.
step() { bash scripts/quietly.sh --append --silent --name "$1" "$LOG" -- "${@:2}"; }
started=$SECONDS
qkviz extract --model "$MODEL" --out "$RUN" --max-tokens "$TOKENS" --head-update
: >"$LOG"
"$PY" -m qkviz serve --run "$RUN" --port "$PORT" >>"$LOG" 2>&1 &   # not the function: $! is the server
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
if ! "$PY" - "$PORT" "$server" <<'PYTHON'
import os, sys, time, urllib.request
port, server = sys.argv[1], int(sys.argv[2])
while True:
    try:
        os.kill(server, 0)                      # the server is still starting
    except OSError:
        sys.exit(1)
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
        break
    except OSError:
        time.sleep(0.5)
PYTHON
then
  status=0
  wait "$server" || status=$?
  { echo "qkviz: qkviz serve stopped (exit status $status); the last 30 lines of its log, $LOG:"
    tail -n 30 "$LOG" | sed 's/^/    /'; } >&2
  exit $((status ? status : 1))
fi
echo "qkviz: the layouts of every head, stats, related heads, search indexes and the report are made beside the app;" \
     "their output and the app's: $LOG"
echo "qkviz: the app is up at $URL ($((SECONDS - started)) s after set-up); the attention t-SNE layouts land while it" \
     "runs (the app shows how many are left)"
# beside the server's worker: one BLAS thread (more threads than free cores make OpenBLAS spin) and a lower
# priority than the app's
step "qkviz project" env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n 10 "$PY" -m qkviz project --run "$RUN"
step "qkviz stats" "$PY" -m qkviz stats --run "$RUN" --syntax
step "qkviz related" "$PY" -m qkviz related --run "$RUN"
step "qkviz index" "$PY" -m qkviz index --run "$RUN"
step "qkviz report" "$PY" -m qkviz report --run "$RUN" --out "$REPORTS/$NAME" --overwrite
qkviz status --run "$RUN"
if [ "${QKVIZ_DEMO_EXIT:-}" = 1 ]; then
  echo "qkviz: all done $((SECONDS - started)) s after set-up. Report: $REPORTS/$NAME/index.html and atlas.html;" \
       "the app: $URL (QKVIZ_DEMO_EXIT=1: stopping it now)"
  exit 0
fi
echo "qkviz: all done $((SECONDS - started)) s after set-up. Report: $REPORTS/$NAME/index.html and atlas.html;" \
     "the app: $URL (Ctrl-C stops it)"
wait "$server"

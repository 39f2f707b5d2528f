#!/usr/bin/env bash
# Set up, then run qkviz on a bundled model over the bundled corpus, with the app up as early as possible:
#   bash scripts/demo.sh            MiniLM, the default
#   bash scripts/demo.sh smollm2    SmolLM2-135M (converted from its GGUF the first time)
#   bash scripts/demo.sh gemma3     Gemma 3 270M (converted the first time: 1.5-3 min, 3.4 GB of memory)
# It does this: extract 5,000 tokens, serve at once (every head in PCA; the attention t-SNE layouts are made in the
# background and switch in as they land), and meanwhile project the rest (sharing the heads with the server),
# the head atlas, related heads, the search indexes and the report, which the app shows as they appear.
# Ctrl-C stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
QKVIZ=.venv/bin/qkviz
MODEL=${1:-minilm}
RUN=runs/$MODEL
PORT=${QKVIZ_PORT:-8050}
started=$SECONDS
$QKVIZ extract --model "$MODEL" --out "$RUN" --max-tokens 5000 --head-update
$QKVIZ serve --run "$RUN" --port "$PORT" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
.venv/bin/python - "$PORT" "$server" <<'EOF'
import os, sys, time, urllib.request
port, server = sys.argv[1], int(sys.argv[2])
while True:
    try:
        os.kill(server, 0)                      # the server is still starting
    except OSError:
        sys.exit("qkviz serve stopped; its message is above")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
        break
    except OSError:
        time.sleep(0.5)
EOF
echo "qkviz: the app is up at http://127.0.0.1:$PORT/ ($((SECONDS - started)) s after set-up); the attention t-SNE layouts" \
     "land while it runs (the app shows how many are left)"
# beside the server's worker: one BLAS thread (more threads than free cores make OpenBLAS spin) and a lower
# priority than the app's
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n 10 $QKVIZ project --run "$RUN"
$QKVIZ stats --run "$RUN" --syntax
$QKVIZ related --run "$RUN"
$QKVIZ index --run "$RUN"
$QKVIZ report --run "$RUN" --out "reports/$MODEL" --overwrite
$QKVIZ status --run "$RUN"
echo "qkviz: all done $((SECONDS - started)) s after set-up. Report: reports/$MODEL/index.html and atlas.html;" \
     "the app: http://127.0.0.1:$PORT/ (Ctrl-C stops it)"
wait "$server"

#!/usr/bin/env bash
# Set up, then run qkviz on the bundled default: MiniLM over the bundled corpus, every head projected
# (PCA in 2D and 3D, attention t-SNE in 2D; 3.5 to 6 minutes on 2 cores), the head atlas, related heads,
# the report and the search indexes (about 9 minutes in all after set-up), then serve the app on 127.0.0.1:8050.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/qkviz extract --model minilm --out runs/minilm --max-tokens 5000 --head-update
.venv/bin/qkviz project --run runs/minilm --jobs 2
.venv/bin/qkviz stats --run runs/minilm --syntax
.venv/bin/qkviz related --run runs/minilm
.venv/bin/qkviz report --run runs/minilm --out reports/minilm --overwrite
.venv/bin/qkviz index --run runs/minilm
.venv/bin/qkviz status --run runs/minilm
echo "report: reports/minilm/index.html and atlas.html; the app: http://127.0.0.1:8050/ (Ctrl-C stops it)"
exec .venv/bin/qkviz serve --run runs/minilm

#!/usr/bin/env bash
# Set up, then run qkviz on the bundled default: MiniLM over the bundled corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/qkviz extract --model minilm --out runs/minilm --max-tokens 10000 "$@"
.venv/bin/qkviz status --run runs/minilm

#!/usr/bin/env bash
# Set up, then run the whole test suite (offline; no test is skipped for lack of a download).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"

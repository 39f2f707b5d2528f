#!/usr/bin/env bash
# Set up, then run the whole test suite (offline; no test is skipped for lack of a download).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The converted SmolLM2 lives in this checkout, so the tests also prove the one-time conversion.
export QKVIZ_CACHE_DIR="${QKVIZ_CACHE_DIR:-$PWD/.cache/qkviz}"
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Set up, then run the whole test suite (offline; no test is skipped for lack of a download).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The suite runs on pytest-xdist (pyproject.toml: -n auto --dist loadgroup); tests/conftest.py's grouping relies on
# the version constraints.txt pins (3.8.0), which setup.sh installs.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The converted SmolLM2 lives in this checkout, so the tests also prove the one-time conversion.
export QKVIZ_CACHE_DIR="${QKVIZ_CACHE_DIR:-$PWD/.cache/qkviz}"
exec .venv/bin/python -m pytest "$@"

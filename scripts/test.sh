#!/usr/bin/env bash
# Set up, then run the whole test suite (offline). Every model the suite needs is bundled or built from a config, except
# the two literature-head tests of tests/integration/atlas/test_literature_heads.py: GPT-2 small's and BERT-base's weights
# are not on PyPI, so those two skip, each in one line naming the weights, unless a Hugging Face cache or
# $QKVIZ_GPT2_SMALL / $QKVIZ_BERT_BASE holds them (no other test skips for lack of a download). On a fresh Debian
# machine this installs what the tests need first: Chromium and its driver for the browser tests, npm and the venv
# module for the set-up (scripts/debian_packages.sh; nothing is installed when they are there).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/debian_packages.sh --browser
bash scripts/setup.sh
# The suite runs on pytest-xdist (pyproject.toml: -n auto --dist loadgroup); tests/conftest.py's grouping relies on
# the version constraints.txt pins (3.8.0), which setup.sh installs.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The converted SmolLM2 lives in this checkout, so the tests also prove the one-time conversion.
export QKVIZ_CACHE_DIR="${QKVIZ_CACHE_DIR:-$PWD/.cache/qkviz}"
exec .venv/bin/python -m pytest "$@"

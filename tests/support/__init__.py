"""Helpers shared by the unit, integration and browser tests (importable as ``support``: pyproject puts
``tests/`` on the path)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CORPUS = REPO / "data" / "sentences.txt"

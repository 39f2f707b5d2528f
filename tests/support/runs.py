"""Planting synthetic heads into real runs: after a test writes vectors into a copy of a run, :func:`reseal`
records the new files' checksums in its manifest, as an extraction that had produced them would have (a
run changed without it is, rightly, refused as damaged)."""

from __future__ import annotations

import json
from pathlib import Path

from qkviz.store.files import MANIFEST, file_sha256


def reseal(run_path: Path) -> None:
    manifest_path = Path(run_path) / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["sha256"] = {name: file_sha256(Path(run_path) / name) for name in manifest["files"]}
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")

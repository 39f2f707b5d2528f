"""A finished run's manifest, read and checked: ``read_manifest`` says in one line why a directory is not a complete
run (absent, interrupted, corrupt, of another schema, a file missing or of another size), and ``with_checksums``
records the sha256 a run made before checksums lacks, so that no run's files are ever read unchecked."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.core.option_names import option
from qkviz.store import files as run_files
from qkviz.store.locks import exclusive_lock

logger = logging.getLogger(__name__)

#: the files every complete run's manifest lists
REQUIRED_FILES = (*run_files.ARRAY_FILES, run_files.TOKENS, run_files.SENTENCES)


def read_manifest(directory: Path) -> dict:
    """The manifest of a complete run, or a :class:`QkvizError` saying why there is none."""
    directory = Path(directory)
    if not directory.is_dir():
        raise QkvizError(f"no run at {directory}: create one with 'qkviz extract --out {directory}'")
    manifest_path = directory / run_files.MANIFEST
    if not manifest_path.exists():
        progress_path = directory / run_files.PROGRESS
        if progress_path.exists():
            raise IncompleteRunError(
                f"{directory} is an interrupted extraction: run the same 'qkviz extract' command again to resume it")
        raise IncompleteRunError(f"{directory} is not a complete qkviz run (no {run_files.MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise IncompleteRunError(f"{manifest_path} is corrupt ({error}); extract the run again with "
                                 f"{option('overwrite')}") from None
    if manifest.get("schema_version") != run_files.SCHEMA_VERSION:
        raise IncompleteRunError(
            f"{directory} has run schema {manifest.get('schema_version')}, this qkviz reads {run_files.SCHEMA_VERSION}; "
            f"extract it again with {option('overwrite')}")
    missing = [name for name in REQUIRED_FILES if name not in manifest.get("files", {})]
    if missing:
        raise IncompleteRunError(f"{directory} lacks {', '.join(missing)} (written by another qkviz version?); "
                                 f"extract it again with {option('overwrite')}")
    for name, size in manifest["files"].items():
        file_path = directory / name
        if not file_path.exists():
            raise IncompleteRunError(f"{directory} is damaged: {name} is missing; extract it again with "
                                     f"{option('overwrite')}")
        if file_path.stat().st_size != size:
            raise IncompleteRunError(
                f"{directory} is damaged: {name} has {file_path.stat().st_size} bytes, the manifest says {size}; "
                f"extract it again with {option('overwrite')}")
    return manifest


def unchecked_files(manifest: dict) -> list[str]:
    """The files of a run's manifest that it records no sha256 of (all of them in runs made before checksums)."""
    recorded = manifest.get("sha256")
    recorded = recorded if isinstance(recorded, dict) else {}
    return [name for name in manifest["files"] if not isinstance(recorded.get(name), str)]


def with_checksums(directory: Path, manifest: dict, read_only: bool = False) -> dict:
    """``manifest`` with a sha256 for every file: one without is checksummed now, as its files are, and its manifest
    rewritten atomically (under the run's manifest lock, so two processes opening it do it once), with a logged
    warning. Where that cannot be written (``read_only``, a read-only directory) it is an
    :class:`IncompleteRunError` saying what to do: a run's files are never read unchecked."""
    missing = unchecked_files(manifest)
    if not missing:
        return manifest
    listed = "any of its files" if len(missing) == len(manifest["files"]) else ", ".join(missing)
    what = f"{directory}'s manifest has no checksum of {listed} (made by an older qkviz, or edited)"
    remedy = (f"open it once where it can be written ('qkviz status --run {directory}' records them), or extract it "
              f"again with {option('overwrite')}")
    if read_only:
        raise IncompleteRunError(f"{what}, and it is opened read-only: {remedy}")
    try:
        with exclusive_lock(directory / f".{run_files.MANIFEST}.lock"):
            manifest = read_manifest(directory)    # another process may have recorded them meanwhile
            missing = unchecked_files(manifest)
            if missing:
                logger.warning("%s: recording the sha256 of the files as they are now, so that later damage is "
                               "caught (damage before now cannot be told)", what)
                recorded = manifest.get("sha256") if isinstance(manifest.get("sha256"), dict) else {}
                manifest = {**manifest, "sha256": {**recorded, **{name: run_files.sha256_of_intact(directory / name)
                                                                   for name in missing}}}
                run_files.write_json_atomic(directory / run_files.MANIFEST, manifest)
    except OSError as error:
        raise IncompleteRunError(f"{what}, and they cannot be recorded there ({error.strerror or error}): "
                                 f"{remedy}") from None
    return manifest

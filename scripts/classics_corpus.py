"""Build data/classics.txt: two public-domain books, one sentence per line, for runs past the bundled corpus.

    python scripts/classics_corpus.py [--out data/classics.txt]

The books are Lewis Carroll's *Alice's Adventures in Wonderland* (1865; Project Gutenberg's Millennium
Fulcrum Edition 2.9) and John Milton's *Paradise Lost* (1667; Project Gutenberg's February 1992 release),
both public domain. They are taken from the Canterbury corpus files ``alice29.txt`` and ``plrabn12.txt``
that the Brotli source distribution on PyPI carries as test data, so the only network this needs is the
package registry. The archive's sha256 is checked. Prefaces, chapter and book headings are dropped;
paragraphs are joined and cut into sentences; a sentence over :data:`MAX_WORDS` words (Milton's run long)
is cut at its semicolons and colons, then at commas, so every line fits a BERT's 512-token window with
room to spare. The output is written to a temporary file and renamed.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHIVE = "brotli-1.2.1.tar.gz"
ARCHIVE_SHA256 = "02b2f7b5a83485efe448a44ddf7983def05c3bb1dcf917d4f7154070260e13de"
BOOKS = {"alice29.txt": "ALICE'S ADVENTURES IN WONDERLAND", "plrabn12.txt": "PARADISE LOST"}
MAX_WORDS = 60
HEADING = re.compile(r"^(CHAPTER [IVXLC]+|Book [IVXLC]+|THE END|\[The End\]|[A-Z][A-Z' ,.-]+)$")


def download_archive(directory: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(directory), "brotli==1.2.1"], check=True)
    archive = directory / ARCHIVE
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != ARCHIVE_SHA256:
        raise SystemExit(f"{archive.name} has sha256 {digest}, expected {ARCHIVE_SHA256}")
    return archive


def book_text(archive: Path, name: str) -> str:
    with tarfile.open(archive) as tar:
        member = tar.getmember(f"brotli-1.2.1/tests/testdata/{name}")
        return tar.extractfile(member).read().decode("latin-1")


def paragraphs(text: str, name: str) -> list[str]:
    """The book's paragraphs, from its first chapter or book on, with headings left out."""
    lines = text.replace("\r", "").split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() in ("CHAPTER I", "Book I"))
    found, current = [], []
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped or HEADING.match(stripped):
            if current:
                found.append(" ".join(current))
            current = []
            continue
        current.append(stripped)
    if current:
        found.append(" ".join(current))
    return [re.sub(r"\s+", " ", paragraph) for paragraph in found]


def sentences(paragraph: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])['\"]?\s+(?=[`'\"(A-Z])", paragraph)
    out = []
    for part in parts:
        out += _short(part.strip())
    return [part for part in out if len(part.split()) >= 3]


def _short(sentence: str) -> list[str]:
    if len(sentence.split()) <= MAX_WORDS:
        return [sentence]
    for pattern in (r"(?<=[;:])\s+", r"(?<=,)\s+"):
        pieces = re.split(pattern, sentence)
        if len(pieces) > 1:
            return [short for piece in _join(pieces) for short in _short(piece)]
    words = sentence.split()
    return [" ".join(words[i:i + MAX_WORDS]) for i in range(0, len(words), MAX_WORDS)]


def _join(pieces: list[str]) -> list[str]:
    """Consecutive pieces joined up to MAX_WORDS words."""
    joined, current = [], []
    for piece in pieces:
        if current and len(" ".join(current + [piece]).split()) > MAX_WORDS:
            joined.append(" ".join(current))
            current = []
        current.append(piece)
    if current:
        joined.append(" ".join(current))
    return joined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "data" / "classics.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        archive = download_archive(Path(directory))
        lines: list[str] = []
        for name in BOOKS:
            for paragraph in paragraphs(book_text(archive, name), name):
                lines += sentences(paragraph)
    unique = list(dict.fromkeys(lines))
    partial = args.out.with_suffix(".partial")
    partial.write_text("\n".join(unique) + "\n", encoding="utf-8")
    partial.replace(args.out)
    print(f"{args.out}: {len(unique)} sentences, {sum(len(line.split()) for line in unique)} words")


if __name__ == "__main__":
    main()

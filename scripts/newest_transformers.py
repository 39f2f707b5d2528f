"""Install, beside the pinned one, the newest transformers release that ``pyproject.toml`` allows, so that the tests
and ``bench/family_sweep.py`` prove qkviz on both ends of the declared range (a user gets the newest, not the pin).

It goes to :data:`NEWEST_DIRECTORY` (``pip install --target``, without dependencies: the venv's own, at the versions
``constraints.txt`` pins, must serve it, which its import check proves). Nothing is done when that release is there
already; without a registry, whatever is there is kept. Run by ``scripts/setup.sh``; ``python
scripts/newest_transformers.py --version`` prints the release installed there.

A release that cannot be installed or imported beside the pinned dependencies is a finding, not a broken set-up:
the set-up goes on, one line says why, and the same line is kept in :data:`NOT_INSTALLED`, which the tests
(``tests/integration/models/test_newest_transformers.py``) report as their failure, naming the release.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEWEST_DIRECTORY = REPO / ".venv" / "share" / "qkviz" / "newest-transformers"
#: why the newest release allowed is not installed (one line), written where installing it failed
NOT_INSTALLED = NEWEST_DIRECTORY.with_name("newest-transformers.failed")


class NotInstallable(Exception):
    """The newest release allowed cannot be installed, or does not import, beside the venv's pinned dependencies."""


def declared_range() -> str:
    """The transformers requirement of ``pyproject.toml``'s dependencies, e.g. ``transformers>=5.0,<6``."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return next(item for item in project["dependencies"] if item.replace(" ", "").startswith("transformers"))


def newest_allowed(requirement: str) -> str | None:
    """The newest release on the registry that ``requirement`` admits (pip's own resolution, nothing installed), or
    None where the registry cannot be reached."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps",
                           "--ignore-installed", "--report", "-", requirement], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    report = json.loads(done.stdout)
    return next((item["metadata"]["version"] for item in report.get("install", [])
                 if item["metadata"]["name"].lower() == "transformers"), None)


def installed_version(directory: Path = NEWEST_DIRECTORY) -> str | None:
    """The transformers release installed in ``directory``, or None."""
    found = sorted(directory.glob("transformers-*.dist-info")) if directory.is_dir() else []
    return found[-1].name.removeprefix("transformers-").removesuffix(".dist-info") if found else None


def install(version: str, directory: Path = NEWEST_DIRECTORY) -> None:
    """``transformers==version`` into ``directory`` (replacing what is there), then an import check with the venv's
    own dependencies; :class:`NotInstallable` in one line where either fails."""
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging),
                           f"transformers=={version}"], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise NotInstallable(f"transformers {version} cannot be installed ({_last_line(done.stderr)})")
    check = subprocess.run([sys.executable, "-c", "import transformers, transformers.models.auto.modeling_auto; "
                            "print(transformers.__version__)"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(staging)})
    if check.returncode != 0 or check.stdout.strip() != version:
        shutil.rmtree(staging, ignore_errors=True)
        raise NotInstallable(f"transformers {version} does not import with this venv's dependencies "
                             f"({_last_line(check.stderr)}): raise the pins in constraints.txt or narrow "
                             "pyproject.toml's range")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="store_true", help="print the release installed and exit")
    args = parser.parse_args()
    if args.version:
        print(installed_version() or "none")
        return
    requirement = declared_range()
    newest = newest_allowed(requirement)
    if newest is None:
        print(f"newest transformers: the registry cannot be reached; keeping {installed_version() or 'none'}",
              file=sys.stderr)
        return
    NOT_INSTALLED.unlink(missing_ok=True)
    if installed_version() != newest:
        try:
            install(newest)
        except NotInstallable as error:
            NOT_INSTALLED.parent.mkdir(parents=True, exist_ok=True)
            NOT_INSTALLED.write_text(f"{newest}\t{error}\n", encoding="utf-8")
            print(f"newest transformers: {error}; the tests will fail on it", file=sys.stderr)
            return
    print(f"newest transformers allowed by {requirement!r}: {newest} ({NEWEST_DIRECTORY.relative_to(REPO)})")


if __name__ == "__main__":
    main()

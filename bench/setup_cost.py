"""What the README's set-up costs a new user: ``python -m bench.setup_cost [--json bench/results/setup_cost.json]``.

Clones this checkout (``git clone --local``, its committed state, as a new user's clone) into a temporary directory
and runs ``bash scripts/setup.sh`` there, as ``scripts/demo.sh`` and ``scripts/test.sh`` do first. It records:

* ``seconds``: the set-up's wall time, from a clone with no ``.venv`` to its end (pip reads the registries; on this
  machine the big wheels, torch among them, come from local files, so a download over a network adds to it);
* ``environment_bytes``: the size of the ``.venv`` it made (every file once: hard links counted once, symbolic links
  not followed), which the README gives a new user.

``--smoke``: the same clone, with the set-up replaced by ``python -m venv --without-pip .venv`` (seconds, not
minutes), the result in a temporary file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.figures.results import Results, figure, minutes, source
from bench.harness import Recorder, smoke_arguments

REPO = Path(__file__).resolve().parent.parent
SETUP = "bash scripts/setup.sh"
#: the smoke run's stand-in for the set-up: an environment made in seconds
SMOKE_SETUP = f"{sys.executable} -m venv --without-pip .venv"


def tree_bytes(root: Path) -> int:
    """The bytes of every file under ``root``, each inode once, symbolic links not followed."""
    seen, total = set(), 0
    for folder, _, files in os.walk(root):
        for name in files:
            status = os.lstat(os.path.join(folder, name))
            if (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                total += status.st_size
    return total


def measure(setup: str, scratch: Path) -> dict:
    clone = scratch / "qkviz"
    subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True)
    shared = REPO.parent / "shared"
    if shared.exists() and not (scratch / "shared").exists():
        (scratch / "shared").symlink_to(shared)          # the project's checkout has ../shared beside it
    with open(scratch / "setup.log", "w") as log:
        started = time.perf_counter()
        done = subprocess.run(setup, shell=True, cwd=clone, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - started
    if done.returncode:
        tail = (scratch / "setup.log").read_text(errors="replace").splitlines()[-20:]
        raise SystemExit(f"the set-up failed (exit {done.returncode}):\n" + "\n".join(tail))
    return {"seconds": round(seconds, 1), "environment_bytes": tree_bytes(clone / ".venv")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", default=SETUP, help=f"the set-up command run in the clone (default: {SETUP})")
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/setup_cost.json")
    args = smoke_arguments(parser, argv, out="json", setup=SMOKE_SETUP)
    recorder = Recorder("setup_cost", vars(args), args.json, every=10.0)
    with tempfile.TemporaryDirectory(prefix="qkviz-setup-cost-") as scratch:
        result = measure(args.setup, Path(scratch))
    note = "a fresh clone's set-up; pip's own cache as this machine has it, large wheels from local files"
    print(f"wrote {recorder.write(setup=args.setup, note=note, **result)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

@figure("setup-cost")
def setup_cost(results: Results) -> str:
    result = results("setup_cost")
    size = result["environment_bytes"] / 1e9
    return (f"The set-up makes a {size:.1f} GB environment in `.venv` in {minutes(result['seconds'])} on a fresh clone "
            f"({source(results, 'setup_cost')}; large wheels from local files).\n")


if __name__ == "__main__":
    main()

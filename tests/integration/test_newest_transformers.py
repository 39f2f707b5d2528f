"""The declared range is the tested range: every family of qkviz's table, the failure boundary and the held-out
batch of model types, run again with the newest transformers release ``pyproject.toml`` allows (installed beside
the pinned one by ``scripts/newest_transformers.py``, which ``scripts/setup.sh`` runs), in a child pytest."""

import os
import subprocess
import sys

import pytest
import transformers
from support import REPO

from scripts.newest_transformers import NEWEST_DIRECTORY, declared_range, installed_version

FILES = ["tests/integration/test_model_families.py", "tests/integration/test_model_boundary.py",
         "tests/integration/test_family_sweep.py"]


def test_the_newest_release_allowed_is_installed_and_in_the_range():
    from packaging.requirements import Requirement

    newest = installed_version()
    assert newest is not None, f"{NEWEST_DIRECTORY} holds no transformers: run scripts/setup.sh"
    assert newest in Requirement(declared_range()).specifier
    assert Requirement(declared_range()).specifier.contains(transformers.__version__)


@pytest.mark.slow
def test_every_family_is_exact_or_refused_in_one_line_with_the_newest_release_allowed():
    newest = installed_version()
    assert newest is not None, f"{NEWEST_DIRECTORY} holds no transformers: run scripts/setup.sh"
    if newest == transformers.__version__:
        pytest.skip(f"the pinned transformers {newest} is the newest allowed: the rest of the suite runs on it")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(NEWEST_DIRECTORY), str(REPO), str(REPO / "tests")])}
    check = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"],
                           capture_output=True, text=True, env=environment, cwd=REPO)
    assert check.stdout.strip() == newest, check.stderr
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *FILES],
                          capture_output=True, text=True, env=environment, cwd=REPO)
    assert done.returncode == 0, f"with transformers {newest}:\n{done.stdout[-6000:]}"

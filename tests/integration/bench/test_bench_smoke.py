"""Every bench runs: each module of the bench package (but its harness, schema and shared helpers) is run with
``--smoke`` on a tiny input in a child process, and the result file it writes follows the schema. The benches are
found by listing the package, so a new one is smoke-run without being added here."""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench import schema
from bench.harness import SMOKE_OUT
from bench.support.tiny_run import tiny_corpus, tiny_model, tiny_run
from support import REPO

BENCHES = sorted(name for _, name, package in pkgutil.iter_modules(bench.__path__)
                 if not package and name not in bench.NOT_BENCHES)


def smoke_arguments(name: str) -> tuple[str, ...]:
    """The bench's ``SMOKE_ARGUMENTS``, read from its source (the bench is not imported here)."""
    tree = ast.parse((REPO / "bench" / f"{name}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "SMOKE_ARGUMENTS" for target in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tiny")
    tiny_run(directory)
    return directory


def test_the_benches_are_found():
    assert {"app", "extract", "search", "thousand_heads"} <= set(BENCHES) and "harness" not in BENCHES


@pytest.mark.parametrize("name", BENCHES)
def test_every_bench_runs_on_a_tiny_input(name, tiny, tmp_path):
    source = (REPO / "bench" / f"{name}.py").read_text(encoding="utf-8")
    assert "smoke_arguments(" in source, f"bench/{name}.py has no --smoke mode (bench.harness.smoke_arguments)"
    run = shutil.copytree(tiny / "run-llama", tmp_path / "run")      # a bench may write into its run
    places = {"run": str(run), "model": str(tiny_model(tiny)), "corpus": str(tiny_corpus(tiny)), "tmp": str(tmp_path)}
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", f"bench.{name}", "--smoke",
               *(argument.format(**places) for argument in smoke_arguments(name))]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", **{SMOKE_OUT: str(out)}))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = schema.check([out])
    assert result == [], result
    written = json.loads(out.read_text())
    assert written["bench"] == f"bench.{name}" and written["smoke"] is True and written["figures"]

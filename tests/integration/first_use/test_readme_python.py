"""The README's Python section as a new user meets it: it names the environment the set-up made (which Python, how
big, how long to make), and its example runs as written, with that Python, from a directory of its own, twice (the
second time over the first time's run and report)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from support import REPO

README = REPO / "README.md"


def python_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Python\n")
    return text[start:text.index("\n## ", start + 1)]


def python_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", python_section(), re.S)
    assert blocks, "the README's Python section has no ```python block"
    return blocks[0]


def test_the_readme_names_the_environment_and_its_size():
    section = python_section()
    assert ".venv/bin/python" in section and ". .venv/bin/activate" in section
    cost = re.search(r"<!-- figures:setup-cost -->\n(.*?)<!-- /figures -->", section, re.S)
    assert cost, "the Python section has no setup-cost figure block"
    assert re.search(r"\d+(\.\d+)? GB environment in `\.venv` in \d+(\.\d+)? (min|s)", cost[1]), cost[1]


@pytest.mark.slow
@pytest.mark.e2e
def test_the_readme_python_block_runs_as_written(tmp_path):
    python = REPO / ".venv" / "bin" / "python"       # the interpreter the README tells a user to run
    assert python.exists(), f"{python} is missing: the README's set-up (scripts/setup.sh) makes it"
    script = tmp_path / "example.py"
    script.write_text(python_block(), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    for attempt in ("first", "again"):
        done = subprocess.run([str(python), str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"the README's block failed ({attempt} run):\n{done.stderr[-3000:]}"
        shape = re.search(r"^\((\d+), 2\)$", done.stdout, re.M)
        assert shape and int(shape[1]) > 0, done.stdout
        assert "contribution" in done.stdout                 # run.explain's table was printed
    import qkviz

    run = qkviz.open_run(tmp_path / "runs" / "example")
    assert run.projection(3, 4, method="attn-tsne").shape == (2 * run.n_tokens, 2)
    assert run.has_projection(0, 0, "pca")
    assert len(run.atlas.table) == run.n_layers * run.n_heads
    assert (tmp_path / "reports" / "example" / "index.html").exists()

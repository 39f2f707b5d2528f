"""examples/notebook.ipynb, executed top to bottom in a real Jupyter kernel (nbclient), offline: in-memory
extraction of the bundled MiniLM, a progress bar as a notebook widget, a figure and its SVG, and the app
shown inline by Dash's Jupyter mode, answering only for its own host while the kernel runs."""

import http.client
import json
import re

import nbformat
import pytest
from nbclient import NotebookClient
from support import REPO

NOTEBOOK = REPO / "examples" / "notebook.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"


def outputs_of(cell) -> list[dict]:
    return [dict(output) for output in cell.get("outputs", [])]


def status_for(port: int, host: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/", headers={"Host": host})
    response = connection.getresponse()
    body = response.read().decode("utf-8", "replace")
    connection.close()
    return response.status, body


def test_the_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)


@pytest.mark.slow
def test_the_example_notebook_runs_offline_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)     # an error in a cell raises CellExecutionError here
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        by_source = {cell.source.splitlines()[0]: cell for cell in code}

        extracted = by_source['run = qkviz.extract(model, sentences, "runs/minilm-notebook", tokenizer=tokenizer)']
        printed = "".join(output.get("text", "") for output in outputs_of(extracted))
        assert re.search(r"\d{3,} tokens, 6 layers x 12 heads", printed), printed
        assert any("(True, 'BertModel')" in output.get("data", {}).get("text/plain", "") for output in outputs_of(extracted))

        projected = outputs_of(by_source['qkviz.project(run, methods=["attn-tsne"], layers=[1, 3], heads=[4])'])
        assert any(WIDGET in output.get("data", {}) for output in projected), projected   # tqdm's notebook bar
        assert not any(output.get("name") == "stderr" and "it/s" in output.get("text", "") for output in projected)

        figure = next(output for output in outputs_of(by_source['fig = run.plot(3, 4, colour="position")'])
                      if PLOTLY in output.get("data", {}))
        data = figure["data"][PLOTLY]
        data = json.loads(data) if isinstance(data, str) else data
        assert [trace["name"] for trace in data["data"]] == ["queries (circles)", "keys (diamonds)"]
        assert "attn-tsne 2D" in data["layout"]["title"]["text"]
        assert (tmp_path / "l3h4.svg").read_text(encoding="utf-8").startswith("<svg")

        shown = outputs_of(by_source["run.show(background=None)"])
        html = " ".join(output.get("data", {}).get("text/html", "") for output in shown)
        match = re.search(r'<iframe[^>]*src="http://127\.0\.0\.1:(\d+)/"', html)
        assert match, shown
        port = int(match.group(1))
        status, body = status_for(port, f"127.0.0.1:{port}")
        assert status == 200 and "<title>qkviz</title>" in body
        assert status_for(port, "rebound.example")[0] == 403

        selection = outputs_of(by_source["run.selection     # None until you select points in the single-head view"])
        assert selection == []     # None shows nothing
    assert (tmp_path / "runs" / "minilm-notebook" / "manifest.json").exists()

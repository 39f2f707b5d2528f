"""A first visit's page: the matrix's first drawing goes only to a page that opens on the matrix (the shell reads the
view from the address its layout request names, :func:`dash_app.app.requested_view`)."""

from dash_app import ids
from dash_app.app import build_app, open_runs
from dash_app.views.matrix.raster import RASTER_POINTS_ENV
from support.browser import copy_run


def test_only_a_page_that_opens_on_the_matrix_carries_its_first_drawing(app_run, tmp_path, monkeypatch):
    monkeypatch.setenv(RASTER_POINTS_ENV, "0")                        # the tiny run's matrix drawn as one image
    run = copy_run(app_run, tmp_path / "run", atlas=False)            # its images are written into the run: a copy
    client = build_app(open_runs([run.path])).server.test_client()

    def drawn(page: str | None) -> bool:
        headers = {"Host": "127.0.0.1:8050", **({"Referer": page} if page else {})}
        layout = client.get("/_dash-layout", headers=headers).get_json()
        found = {node["props"]["id"]: node["props"] for node in components(layout)
                 if node["props"].get("id") in (ids.MATRIX_GRAPH, ids.MATRIX_RENDERED)}
        figure, key = found[ids.MATRIX_GRAPH]["figure"], found[ids.MATRIX_RENDERED].get("data")
        assert bool(figure["data"]) == (key is not None)                 # the drawing and its key go together
        return key is not None

    site = "http://127.0.0.1:8050/"
    assert drawn(None) and drawn(site) and drawn(site + "?view=matrix&method=pca") and drawn(site + "?view=nope")
    assert not drawn(site + "?view=composition&method=pca") and not drawn(site + "?view=single&layer=1")


def components(node):
    """Every component of a layout as Dash sends it, depth first."""
    if isinstance(node, list):
        for child in node:
            yield from components(child)
    elif isinstance(node, dict) and "props" in node:
        yield node
        yield from components(node["props"].get("children"))

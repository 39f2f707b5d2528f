"""``run.show()`` then a selection in the app's single-head view, in headless Chromium: ``run.selection`` in the
notebook holds exactly the points the user selected (outside Jupyter, run.show serves from a thread of this
process, as it does from a notebook's kernel)."""

import numpy as np
from support.browser import copy_run, launch_chromium, new_page, wait_idle
from support.selection import box_select, check_selected, expected_in_box


def test_a_box_selection_in_the_shown_app_is_run_selection(tiny_run, tmp_path):
    from playwright.sync_api import sync_playwright

    import qkviz

    run = qkviz.open_run(copy_run(tiny_run("bert", max_sentences=8), tmp_path / "shown", atlas=False).path)
    run.show(mode="external", background=None, progress=False)
    assert run.selection is None
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page, errors = new_page(browser)
            page.goto(run.app_url + "?view=single&layer=1&head=1&method=pca&dim=2")
            page.wait_for_function("() => { const g = document.querySelector('#single-graph .js-plotly-plot');"
                                   " return g && g._fullData && g._fullData.length >= 2 && g._fullData[0].x.length > 0; }",
                                   timeout=30_000)
            wait_idle(page)
            box = box_select(page, "single-graph", (0.2, 0.2, 0.8, 0.8))
            page.wait_for_function("() => document.getElementById('selection-table').innerText"
                                   ".includes('points selected')", timeout=20_000)
            inside, edge = expected_in_box(page, "single-graph", box)
            browser.close()
            assert not errors, errors
    finally:
        run._shown.stop()
    selection = run.selection
    assert 0 < len(inside) and selection is not None
    check_selected(set(selection.point), inside, edge)
    assert (selection["layer"] == 1).all() and (selection["head"] == 1).all()
    rows = selection.point.to_numpy() % run.n_tokens
    assert (selection.token.to_numpy() == run.tokens.token.to_numpy()[rows]).all()
    norms = np.concatenate([np.linalg.norm(run.queries(1, 1), axis=1), np.linalg.norm(run.keys(1, 1), axis=1)])
    assert np.allclose(selection.norm, norms[selection.point], rtol=1e-5)

"""How fast the document view is in a real browser (headless Debian Chromium, Playwright's Python package):

    python -m bench.document_view --run3k /tmp/qkviz-modern-copy/run --document3k 0 \
                                  --run8k /tmp/qkviz-doc8k/run --document8k 0

* **open to drawn** on a document of about 3,000 tokens: the page is on the Positions view of the document's head;
  from the click on the Document tab (the user's action) to the whole map's image drawn in the page (its
  ``<image>`` holding the server's PNG for that head); each repeat another head, so the server computes every
  map (no cache). The goal (issue 28) is at most 5 s.
* **head switch** on a document of about 8,192 tokens: the view drawn for one head, then another head chosen in
  the view's Head menu; from the click on the option to the new head's image drawn (goal: at most 2 s). Each
  repeat another head.
* **server compute**: :func:`qkviz.analysis.document_overview` alone for the 8,192-token document (map and profile),
  in this process, for the same heads.

``qkviz serve`` writes each head's PCA layout into a run it serves (before it answers): give it copies of shared
runs. ``--smoke``: one repeat of each on the run given for both (``--run3k`` and ``--run8k``), the result in a
temporary file. Each figure is min / median / max of ``--repeats`` (5). Results go to ``bench/results/document_view.json`` with the
date, the machine (its load average before and after: the 2-core machine is shared, so the timings are taken
under whatever load it has) and the arguments.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.harness import Recorder, smoke_arguments
from bench.support.browser import launch_chromium, start_server, stop_server
from bench.figures.goals import Goal, verdict
from bench.figures.results import Results, figure, source

#: true once the map's image of ``layer L head H`` is in the page (Playwright polls it every animation frame)
DRAWN_JS = """([layer, head]) => {
  const graph = document.querySelector('#document-graph .js-plotly-plot');
  if (!graph || !graph._fullLayout || !graph._fullData || !graph._fullData.length) return false;
  const title = (graph._fullLayout.title || {}).text || '';
  const image = graph.querySelector('g.im image');
  return title.includes('layer ' + layer + ' head ' + head + ',') && !!image
         && (image.getAttribute('href') || '').startsWith('data:image/png');
}"""


def summary(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3),
            "values": [round(value, 3) for value in values]}


def heads(repeats: int, offset: int, layers: int = 32, per_layer: int = 32) -> list[tuple[int, int]]:
    """``repeats`` (layer, head) spread over a grid of ``layers`` x ``per_layer`` heads (distinct on a 32 x 32 grid)."""
    return [((offset + 7 * index) % layers, (offset + 11 * index + 3) % per_layer) for index in range(repeats)]


def open_to_drawn(browser, url: str, document: int, layer: int, head: int) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}?view=positions&sentence={document}&layer={layer}&head={head}")
    page.wait_for_selector("#view-tabs", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-dash-is-loading=\"true\"]')", timeout=60_000)
    tab = page.locator("#view-tabs").get_by_text("Document", exact=True)
    started = time.perf_counter()
    tab.click()
    page.wait_for_function(DRAWN_JS, arg=[layer, head], timeout=120_000)
    elapsed = time.perf_counter() - started
    page.close()
    return elapsed


def head_switch(page, layer: int, head: int) -> float:
    page.click("#document-head")
    option = page.get_by_role("option", name=str(head), exact=True)
    started = time.perf_counter()
    option.click()
    page.wait_for_function(DRAWN_JS, arg=[layer, head], timeout=120_000)
    return time.perf_counter() - started


def server_compute(run_path: Path, document: int, chosen: list[tuple[int, int]]) -> list[float]:
    import qkviz
    from qkviz.analysis import document_head, document_overview, repeated_span

    run = qkviz.open_run(run_path)
    rows = run.sentence_tokens(document)
    special = run.tokens.is_special.to_numpy()[rows]
    repeat = repeated_span(run.tokens.token_id.to_numpy()[rows])
    times = []
    for layer, head in chosen:
        started = time.perf_counter()
        document_overview(document_head(run, layer, head, document), special, repeat, (640, 640))
        times.append(time.perf_counter() - started)
    return times


def document_tokens(run_path: Path, document: int) -> int:
    import qkviz

    run = qkviz.open_run(run_path)
    return int(run.sentences.n_tokens[document])


def grid(run_path: Path) -> tuple[int, int]:
    """The run's layers and heads per layer."""
    import qkviz

    run = qkviz.open_run(run_path)
    return run.n_layers, run.n_heads


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run3k", "{run}", "--run8k", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run3k", type=Path, default=Path("/tmp/qkviz-modern-copy/run"))
    parser.add_argument("--document3k", type=int, default=0)
    parser.add_argument("--run8k", type=Path, default=Path("/tmp/qkviz-doc8k/run"))
    parser.add_argument("--document8k", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="default bench/results/document_view.json")
    args = smoke_arguments(parser, argv, repeats=1)
    from playwright.sync_api import sync_playwright

    recorder = Recorder("document_view", vars(args), args.out)
    result = {"browser": "headless Debian Chromium (software rendering)",
              "note": "the 2-core machine was shared with other work while this ran: timings were taken under load "
                      "(see the load averages)"}
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        server, url = start_server([args.run3k], timeout=600)
        try:
            chosen = heads(args.repeats, 1, *grid(args.run3k))
            opened = [open_to_drawn(browser, url, args.document3k, layer, head) for layer, head in chosen]
        finally:
            stop_server(server)
        result["open_to_drawn_3k"] = {"tokens": document_tokens(args.run3k, args.document3k), "heads": chosen,
                                      "goal_s": 5.0, **summary(opened)}
        print(json.dumps(result["open_to_drawn_3k"]), flush=True)

        server, url = start_server([args.run8k], timeout=600)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}?view=document&sentence={args.document8k}&layer=0&head=0")
            page.wait_for_function(DRAWN_JS, arg=[0, 0], timeout=120_000)
            chosen = [(0, head % grid(args.run8k)[1]) for head in range(1, args.repeats + 1)]
            switched = [head_switch(page, layer, head) for layer, head in chosen]
            page.close()
        finally:
            stop_server(server)
        browser.close()
    result["head_switch_8k"] = {"tokens": document_tokens(args.run8k, args.document8k), "heads": chosen, "goal_s": 2.0,
                                **summary(switched)}
    print(json.dumps(result["head_switch_8k"]), flush=True)
    result["server_compute_8k"] = {"heads": chosen, **summary(server_compute(args.run8k, args.document8k, chosen))}
    print(json.dumps(result["server_compute_8k"]), flush=True)
    print(f"wrote {recorder.write(**result)}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: the document view's goals (issue 28), on the medians of ``bench/document_view.py``: click to the map drawn
DOCUMENT_OPEN = Goal("a 3,000-token document's whole map drawn after the Document tab is clicked", 5.0, "s", True,
                     "document_view", "click to drawn, median", lambda found: found["open_to_drawn_3k"]["median"], 2)

DOCUMENT_SWITCH = Goal("a head switch at 8,192 tokens drawn after the click", 2.0, "s", True, "document_view",
                       "click to drawn, median", lambda found: found["head_switch_8k"]["median"], 2)

@figure("document-view")
def document_view(results: Results) -> str:
    """docs/app.md's document view: opening a document and switching heads, against their goals."""
    result = results("document_view")
    opened, switch, server = result["open_to_drawn_3k"], result["head_switch_8k"], result["server_compute_8k"]

    def row(label: str, value: dict, goal: Goal | None) -> str:
        said = verdict(goal, results) if goal else ""
        return f"| {label} | {value['min']:.2f} s | {value['median']:.2f} s | {value['max']:.2f} s | {said} |"
    rows = [row(f"Document tab clicked → whole map drawn, {opened['tokens']:,} tokens", opened, DOCUMENT_OPEN),
            row(f"head switch (Head menu) → new map drawn, {switch['tokens']:,} tokens", switch, DOCUMENT_SWITCH),
            row(f"server compute alone (map + profile), {switch['tokens']:,} tokens", server, None)]
    return ("| measure | min | median | max | goal |\n|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\n`bench/document_view.py`, {len(opened['values'])} heads each ({source(results, 'document_view')}).\n")


if __name__ == "__main__":
    main()

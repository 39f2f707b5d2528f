"""How soon the demo shows its first picture: ``python -m bench.first_picture [--out DIR] [--keep-run]``.

Runs the steps of ``scripts/demo.sh`` after set-up, as the demo runs them, on a fresh run directory, and
drives Debian's headless Chromium to the app as soon as it answers:

* ``extract``: ``qkviz extract --model minilm --max-tokens 5000 --head-update``;
* ``server answers``: ``qkviz serve`` started (it makes every head's PCA layout first) until its page answers;
* ``matrix drawn``: the page opened until the matrix view shows every head (in PCA, marked as waiting)
  with no callback pending -- the first interactive picture; all times are counted from the start;
* the server's own estimate of the time the remaining attention t-SNE layouts take (its log line, once a
  tenth of them have landed), and the time they then took;
* ``all layouts``: until the app's progress line says every head's attention t-SNE layout has landed,
  with ``qkviz project`` running beside the server as the demo runs it (``--no-project``: the server alone).

One run (a fresh run directory each time); ``--json`` (``bench/results/first_picture.json``) records the times
with the date, machine, load averages and arguments. ``--smoke``: the same steps on a tiny model and corpus
(``--model``, ``--corpus``; 200 tokens), the result in a temporary file.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.support.browser import free_port, launch_chromium  # noqa: E402
from bench.figures.results import Results, figure, minutes, source  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]
MATRIX_READY = """(heads) => { const g = document.querySelector('#matrix-graph .js-plotly-plot');
  return g && g.data && g.data.length >= 5 && g.data[4].text.length === heads
         && !document.querySelector('[data-dash-is-loading="true"]'); }"""


def wait_answer(url: str, server: subprocess.Popen) -> None:
    while server.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"qkviz serve stopped: {server.stdout.read()}")


def heads(run: Path) -> int:
    """The number of heads in ``run`` (the matrix shows each)."""
    from qkviz import open_run

    opened = open_run(run)
    return opened.n_layers * opened.n_heads


#: what the smoke test adds to ``--smoke`` (``{model}``, ``{corpus}``: a tiny model and a few sentences;
#: ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--model", "{model}", "--corpus", "{corpus}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", help="the model extracted (default: the demo's, minilm)")
    parser.add_argument("--corpus", type=Path, help="the sentences extracted (default: qkviz extract's)")
    parser.add_argument("--max-tokens", type=int, default=5000)
    parser.add_argument("--out", type=Path, help="run directory to make (default: a temporary one)")
    parser.add_argument("--no-project", action="store_true", help="leave the layouts to the server alone")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for every layout")
    parser.add_argument("--json", type=Path, help="where to write the result (default bench/results/first_picture.json)")
    args = smoke_arguments(parser, argv, out="json", max_tokens=200)
    recorder = Recorder("first_picture", vars(args), args.json)
    from playwright.sync_api import sync_playwright

    scratch = Path(tempfile.mkdtemp(prefix="qkviz-first-"))
    run = args.out or scratch / "minilm"
    times: dict[str, float] = {}
    start = time.monotonic()
    subprocess.run([*QKVIZ, "-q", "extract", "--model", args.model, "--out", str(run), "--max-tokens",
                    str(args.max_tokens), "--head-update", *(["--corpus", str(args.corpus)] if args.corpus else [])],
                   check=True)
    times["extract"] = time.monotonic() - start
    total = heads(run)
    port = free_port()
    server = subprocess.Popen([*QKVIZ, "serve", "--run", str(run), "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    log: list[tuple[float, str]] = []
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_answer(url, server)
        times["server answers"] = time.monotonic() - start
        threading.Thread(target=lambda: log.extend((time.monotonic() - start, line) for line in server.stdout),
                         daemon=True).start()
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_function(MATRIX_READY, arg=total, timeout=120_000)
            times["matrix drawn"] = time.monotonic() - start
            project = None if args.no_project else subprocess.Popen([*QKVIZ, "-q", "project", "--run", str(run)])
            page.wait_for_function("(total) => document.getElementById('layout-progress').innerText"
                                   ".includes(`${total}/${total} heads · made in`)", arg=total,
                                   timeout=args.timeout * 1000, polling=1000)
            times["all layouts"] = time.monotonic() - start
            if project is not None:
                project.wait()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    logged = next(((seconds, match.group(1)) for seconds, line in log
                   for match in [re.search(r"will take about (.+?) at this pace", line)] if match), None)
    for name, seconds in times.items():
        print(f"{name:<15} {seconds:6.1f} s after the start")
    print("server's estimate of the rest, once a tenth had landed: "
          + (f"{logged[1]}, logged {logged[0]:.0f} s after the start" if logged else "not logged"))
    print(recorder.write(seconds_from_start={name: round(seconds, 1) for name, seconds in times.items()},
                         estimate={"text": logged[1], "logged_at_s": round(logged[0], 1)} if logged else None))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("first-picture")
def first_picture(results: Results) -> str:
    result = results("first_picture")
    times = result["seconds_from_start"]
    labels = {"extract": "extract 5,000 tokens", "server answers": "the app answers (every head's PCA made first)",
              "matrix drawn": "matrix view drawn in Chromium",
              "all layouts": "every head's attention t-SNE layout landed (server and `qkviz project` sharing them)"}
    rows = "\n".join(f"| {labels[name]} | {minutes(seconds)} |" for name, seconds in times.items() if name in labels)
    estimate = result.get("estimate")
    said = (f" The server estimated the rest at {estimate['text']} when a tenth had landed "
            f"({estimate['logged_at_s']:.0f} s)." if estimate else "")
    return (f"| from the start (one run) | time |\n|---|---|\n{rows}\n\n"
            f"Measured by `bench/first_picture.py` (the demo's steps, real Chromium).{said} "
            f"({source(results, 'first_picture')}.)\n")


if __name__ == "__main__":
    main()

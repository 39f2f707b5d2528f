"""Screenshots of every view of the app over one run, for docs/views.md's before / after pairs.

    python scripts/screenshots.py runs/minilm docs/screenshots after

serves the run (``qkviz serve --background none``), opens each view of :data:`SHOTS` in headless Chromium
(Debian's ``/usr/bin/chromium``, as the browser tests) at a 1400 x 900 window and writes
``<out>/<label>/<name>.png``, reduced to a 256-colour palette (the commonest colours exactly, the rest
fitted by k-means) so that each stays a few hundred KB. Chromium decodes its own screenshot into pixels
(a canvas; the browser tests' helpers, tests/support/browser.py), so nothing beyond numpy and Playwright is
needed.

The shots assume a MiniLM run as ``scripts/demo.sh`` makes it (PCA 2D and 3D, attention t-SNE 2D, stats and
related heads); query 1666 at layer 3 head 4 is the point of issue 17. ``--images`` shoots an image run instead
(:data:`IMAGE_SHOTS`; docs/images.md says how the one shown there is made).
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.browser import CHROMIUM, CHROMIUM_ARGS, IDLE_JS, WINDOW_SHARE_JS, screenshot_pixels  # noqa: E402

WINDOW = {"width": 1400, "height": 900}
#: name -> the URL's query string of the view shot
SHOTS = {
    "matrix": "view=matrix&method=attn-tsne&dim=2",
    "single-2d": "view=single&layer=3&head=4&method=attn-tsne&dim=2&colour=frequency&sentence=75&point=1666",
    "single-3d": "view=single&layer=3&head=4&method=pca&dim=3&colour=punctuation",
    "sentence": "view=sentence&layer=3&head=4&method=attn-tsne&dim=2&sentence=75",
    "positions": "view=positions&layer=3&head=4&method=attn-tsne&dim=2",
    "heads": "view=heads&layer=3&head=4&method=attn-tsne&dim=2",
    # views that did not exist before issue 17: every head coloured by one setting, a rare token's match ringed
    "matrix-position-search": "view=matrix&method=attn-tsne&dim=2&colour=position&search=vaccine",
    "single-search": "view=single&layer=3&head=4&method=attn-tsne&dim=2&colour=position&search=vaccine",
}
#: with --images, over an image run (a tiny ViT over the sample images, as docs/images.md makes it): the image view
#: (the astronaut, the query patch at row 4 column 6), the single view by patch row, the matrix by patch column
IMAGE_SHOTS = {
    "image-view": "view=sentence&layer=1&head=2&method=attn-tsne&dim=2&sentence=0&point=63",
    "image-single": "view=single&layer=1&head=2&method=attn-tsne&dim=2&colour=patch_row&sentence=0&point=63",
    "image-matrix": "view=matrix&method=attn-tsne&dim=2&colour=patch_col",
}
#: name -> the id of the view's (main) graph, whose share of the window is printed
GRAPHS = {"image-view": "sentence-graph", "image-single": "single-graph", "image-matrix": "matrix-graph",
          "matrix": "matrix-graph", "single-2d": "single-graph", "single-3d": "single-graph",
          "sentence": "sentence-graph", "positions": "positions-graph", "heads": "heads-graph",
          "matrix-position-search": "matrix-graph", "single-search": "single-graph"}


def start(run: Path, port: int) -> subprocess.Popen:
    """``qkviz serve`` of ``run`` on ``port``, once it answers."""
    server = subprocess.Popen([sys.executable, "-m", "qkviz", "serve", "--run", str(run), "--port", str(port),
                               "--background", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"qkviz serve exited with {server.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
            return server
        except OSError:
            time.sleep(0.5)
    server.terminate()
    sys.exit("qkviz serve did not answer within 120 s")


def rgb(packed: np.ndarray) -> np.ndarray:
    """int32 ``[n, 3]`` of colours packed as ``0xRRGGBB``."""
    return np.stack([(packed >> 16) & 255, (packed >> 8) & 255, packed & 255], -1).astype(np.int32)


def nearest(colours: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """The index of the nearest of ``palette`` ``[m, 3]`` for each of ``colours`` ``[n, 3]`` (squared RGB distance)."""
    found = np.empty(len(colours), dtype=np.int64)
    for start in range(0, len(colours), 4096):
        found[start:start + 4096] = np.argmin(((colours[start:start + 4096, None] - palette[None]) ** 2).sum(-1), 1)
    return found


def palette_png(image: np.ndarray, exact: int = 128, fitted: int = 128, rounds: int = 8) -> bytes:
    """``image`` ``[height, width, 3]`` as an 8-bit palette PNG: its ``exact`` commonest colours (page, text,
    flat fills) and ``fitted`` more by weighted k-means over the rest (gradients, blended points), every pixel
    mapped to its nearest."""
    packed = (image.astype(np.uint32) << np.array([16, 8, 0], dtype=np.uint32)).sum(axis=2)
    colours, inverse, counts = np.unique(packed.ravel(), return_inverse=True, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    palette = rgb(colours[order[:exact]])
    rest, weights = rgb(colours[order[exact:]]).astype(np.float64), counts[order[exact:]].astype(np.float64)
    if len(rest) > fitted:
        centres = rest[np.random.default_rng(0).choice(len(rest), fitted, replace=False, p=weights / weights.sum())]
        for _ in range(rounds):
            members = nearest(rest, centres)
            totals = np.bincount(members, weights, minlength=fitted)
            sums = np.stack([np.bincount(members, weights * rest[:, axis], minlength=fitted) for axis in range(3)], 1)
            centres = np.where(totals[:, None] > 0, sums / np.maximum(totals, 1)[:, None], centres)
        palette = np.concatenate([palette, np.rint(centres).astype(np.int32)])
    elif len(rest):
        palette = np.concatenate([palette, rest.astype(np.int32)])
    indices = nearest(rgb(colours), palette).astype(np.uint8)[inverse].reshape(image.shape[:2])
    rows = np.concatenate([np.zeros((len(indices), 1), dtype=np.uint8), indices], axis=1)     # filter 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", image.shape[1], image.shape[0], 8, 3, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"PLTE", palette.astype(np.uint8).tobytes())
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9)) + chunk(b"IEND", b""))


def shoot(url: str, out: Path, shots: dict[str, str]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for name, query in shots.items():
            page = browser.new_page(viewport=WINDOW)
            page.goto(f"{url}?{query}")
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length > 0", timeout=60_000)
            page.wait_for_timeout(1500)
            page.wait_for_function(IDLE_JS, timeout=120_000)
            page.wait_for_timeout(2500)                                  # WebGL draws after the callbacks
            path = out / f"{name}.png"
            path.write_bytes(palette_png(screenshot_pixels(page)))
            figure, plot = page.evaluate(WINDOW_SHARE_JS, GRAPHS[name])
            print(f"{path}: {path.stat().st_size / 1000:.0f} KB; its figure covers {figure:.0%} of the window, "
                  f"its plot area {plot:.0%}")
            page.close()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path, help="the screenshots' folder (docs/screenshots)")
    parser.add_argument("label", help="the set's name, a subfolder of out (before, after)")
    parser.add_argument("--port", type=int, default=8071)
    parser.add_argument("--only", nargs="*", choices=[*SHOTS, *IMAGE_SHOTS], help="only these shots")
    parser.add_argument("--images", action="store_true", help="the image run's shots (IMAGE_SHOTS) instead")
    args = parser.parse_args()
    shots = IMAGE_SHOTS if args.images else SHOTS
    out = args.out / args.label
    out.mkdir(parents=True, exist_ok=True)
    server = start(args.run, args.port)
    try:
        shoot(f"http://127.0.0.1:{args.port}/", out, {name: query for name, query in shots.items()
                                                      if not args.only or name in args.only})
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()

"""The document view in headless Chromium over a document of 2,687 tokens (a tiny long-context Llama): the whole
map is drawn as one server-made image (no SVG element per cell), a zoom draws the region on screen again with
the token strip following it, tokens are labelled once zoomed in, and another head is drawn in time."""

import re
import time

import pytest
from support.browser import served_app, wait_idle
from support.long_documents import long_document_run

from dash_app import ids

#: the map's image once drawn: [its trace's x0, dx, the number of <image> elements, the SVG elements in the plot]
IMAGE_JS = """() => {
  const graph = document.querySelector('#document-graph .js-plotly-plot');
  if (!graph || !graph._fullData || !graph._fullData.length || graph._fullData[0].type !== 'image') return null;
  const images = graph.querySelectorAll('.imagelayer image, g.im image');
  if (!images.length || !(images[0].getAttribute('href') || '').startsWith('data:image/png')) return null;
  const trace = graph._fullData[0];
  return [trace.x0, trace.dx, images.length, graph.querySelectorAll('svg *').length, images[0].getAttribute('href')];
}"""
STRIP_JS = """() => Array.from(document.querySelectorAll('#document-strip .strip-range')).map(e => e.innerText)"""
#: the plot area's page box: [left, top, width, height]
PLOT_BOX_JS = """() => {
  const graph = document.querySelector('#document-graph .js-plotly-plot'), box = graph.getBoundingClientRect();
  const size = graph._fullLayout._size;
  return [box.left + size.l, box.top + size.t, size.w, size.h];
}"""


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, corpus_sentences):
    return long_document_run(tmp_path_factory.mktemp("long-documents"), corpus_sentences)


@pytest.fixture(scope="module")
def served(long_run):
    with served_app([long_run.path]) as url:
        yield url


def wait_image(page, previous: str | None = None, timeout_ms: int = 30_000) -> list:
    page.wait_for_function(f"() => {{ const drawn = ({IMAGE_JS})(); return drawn && drawn[4] !== {previous!r}; }}"
                           if previous else f"() => ({IMAGE_JS})() !== null", timeout=timeout_ms)
    return page.evaluate(IMAGE_JS)


def test_the_whole_map_is_one_image_and_a_zoom_redraws_it_with_the_strip(page, served, long_run):
    n = int(long_run.sentences.n_tokens[0])
    started = time.monotonic()
    page.goto(f"{served}?view=document&sentence=0&layer=1&head=2")
    x0, dx, images, elements, source = wait_image(page)
    opened = time.monotonic() - started
    assert opened < 20, opened                       # the benchmark measures it on a quiet document (goal: 5 s)
    assert images == 1 and elements < 400            # one image, not n^2 cells
    assert dx == pytest.approx(n / 640, rel=0.01) and x0 == pytest.approx(-0.5 + dx / 2)
    wait_idle(page)
    assert page.evaluate(STRIP_JS) == [f"keys 0–{n - 1}: ", f"queries 0–{n - 1}: "]
    assert "previous token" in page.inner_text(f"#{ids.DOCUMENT_SCORES}")
    assert "over 8" in page.inner_text(f"#{ids.DOCUMENT_SCORES}") or "induction" in page.inner_text(f"#{ids.DOCUMENT_SCORES}")

    # a box drawn with the mouse over the lower right quarter: the image is drawn again for that region
    left, top, width, height = page.evaluate(PLOT_BOX_JS)
    page.mouse.move(left + width * 0.5, top + height * 0.5)
    page.mouse.down()
    page.mouse.move(left + width * 0.7, top + height * 0.65, steps=5)
    page.mouse.move(left + width * 0.75, top + height * 0.75, steps=5)
    page.mouse.up()
    _, zoomed_dx, _, _, _ = wait_image(page, source)
    wait_idle(page)
    keys, queries = page.evaluate(STRIP_JS)
    key_start, key_stop = map(int, re.findall(r"\d+", keys))
    query_start, query_stop = map(int, re.findall(r"\d+", queries))
    assert abs(key_start - n * 0.5) < n * 0.02 and abs(key_stop - n * 0.75) < n * 0.02
    assert abs(query_start - n * 0.5) < n * 0.02 and abs(query_stop - n * 0.75) < n * 0.02
    assert zoomed_dx == pytest.approx((key_stop + 1 - key_start) / 640, rel=0.05)
    strip_tokens = page.locator(f"#{ids.DOCUMENT_STRIP} .strip-line").first.locator(".strip-token")
    assert strip_tokens.first.get_attribute("title") == str(key_start)

    # zoomed in to 20 tokens: one pixel column per token, the tokens named on the axes and in the strip
    source = page.evaluate(IMAGE_JS)[4]
    page.evaluate("""() => Plotly.relayout(document.querySelector('#document-graph .js-plotly-plot'),
                     {'xaxis.range': [999.5, 1019.5], 'yaxis.range': [1029.5, 1009.5]})""")
    _, dx, _, _, _ = wait_image(page, source)
    assert dx == pytest.approx(1.0)
    wait_idle(page)
    assert page.evaluate(STRIP_JS) == ["keys 1000–1019: ", "queries 1010–1029: "]
    tokens = long_run.tokens.token.to_numpy()[long_run.sentence_tokens(0)]
    ticks = page.evaluate("() => document.querySelector('#document-graph .js-plotly-plot')._fullLayout.xaxis.ticktext")
    assert ticks[0].endswith(" 1000") and len(ticks) == 20
    assert page.locator(f"#{ids.DOCUMENT_STRIP} .strip-token").first.inner_text() == str(tokens[1000])


def test_another_head_is_drawn_in_time(page, served):
    page.goto(f"{served}?view=document&sentence=0&layer=0&head=0")
    source = wait_image(page)[4]
    wait_idle(page)
    page.click(f"#{ids.DOCUMENT_HEAD}")
    started = time.monotonic()
    page.get_by_role("option", name="3", exact=True).click()
    wait_image(page, source)
    switched = time.monotonic() - started
    assert switched < 10, switched                    # the benchmark measures it at 8,192 tokens (goal: 2 s)
    page.wait_for_function("() => /head=3/.test(location.search)", timeout=10_000)
    title = page.evaluate("() => document.querySelector('#document-graph .js-plotly-plot')._fullLayout.title.text")
    assert "layer 0 head 3" in title

"""The app's image-run pieces without a browser: colour choices per run, server-side validation, search by image id,
the patch panel and the image view's figures."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from dash_app.data.run_data import RunData
from dash_app.data.token_search import TokenSearch
from qkviz.search import ImageIds
from dash_app.state.view_state import ViewState, checked_state
from dash_app.views import image_attention, sentence, single
from qkviz.report import COLOURS, IMAGE_COLOURS, TEXT_COLOURS


@pytest.fixture(scope="module")
def image_data(image_run):
    return RunData(image_run, "vit")


def decoded(uri: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def test_colour_choices_follow_the_run(image_data, app_run):
    text_data = RunData(app_run, "llama")
    assert text_data.colours == TEXT_COLOURS and set(TEXT_COLOURS) | set(IMAGE_COLOURS) == set(COLOURS)
    assert "punctuation" in TEXT_COLOURS and "patch_row" not in TEXT_COLOURS
    assert image_data.colours == IMAGE_COLOURS
    np.testing.assert_array_equal(image_data.features.patch_row.to_numpy(), image_data.tokens.patch_row.to_numpy())
    np.testing.assert_array_equal(image_data.features.image.to_numpy(), image_data.tokens.sentence.to_numpy())
    # a forged state asking a text run for an image colour (or the reverse) falls back to the default
    assert checked_state({"run": 0, "colour": "patch_row"}, [text_data]).colour == "type"
    assert checked_state({"run": 0, "colour": "punctuation"}, [image_data]).colour == "type"
    assert checked_state({"run": 0, "colour": "patch_col"}, [image_data]).colour == "patch_col"


def test_search_matches_image_ids_whole_or_in_part(image_data):
    search = TokenSearch(image_data.token_index, lambda method: None, ImageIds(image_data.sentences))
    texts = image_data.sentences.text.tolist()
    rocket = texts.index("rocket")
    np.testing.assert_array_equal(search.find("Rocket ", False).tokens, np.arange(*image_data.run.sentence_tokens(rocket).indices(
        image_data.run.n_tokens)))
    crops = [i for i, text in enumerate(texts) if "rocket" in text]
    assert len(crops) == 5 and search.find("rocket", True).count == 5 * 17
    assert search.count_text("rocket", True) == "85 tokens (5 images by id)"
    cls = search.find("CLS", False).tokens                   # a token's text still matches as before
    assert len(cls) == image_data.run.n_sentences and image_data.tokens.is_special.to_numpy()[cls].all()
    assert search.find("no such image", True).count == 0


def test_the_patch_panel_shows_the_pixels_the_model_saw(image_data):
    run = image_data.run
    token = int(run.sentence_tokens(7).start + 6)
    state = ViewState(run=0, view="single", colour="patch_col")
    details = single.point_details(image_data, state, token + run.n_tokens)
    image = details[0].children[0]
    shown = decoded(image.src)
    stored = run.patch_thumbnails()[token]
    np.testing.assert_array_equal(shown[::shown.shape[0] // stored.shape[0], ::shown.shape[1] // stored.shape[1]], stored)
    text = " ".join(str(part.children) for part in details[1:])
    assert run.sentences.text.iat[7] in text and "row 1, column 1" in text and "patch column" in text
    special = single.hovered_line(image_data, int(run.sentence_tokens(7).start), None)
    assert "no patch" in " ".join(str(part.children) for part in special[1:])


def test_the_image_view_lays_attention_over_the_tiled_image(image_data):
    run = image_data.run
    image, layer, head = 11, 1, 1
    rows, cols = run.image_input["grid"]
    query_token = int(run.sentence_tokens(image).start + 1 + 2 * cols)      # patch (2, 0)
    state = ViewState(run=0, view="sentence", layer=layer, head=head, sentence=image, point=query_token)
    weights_of = lambda l, h: sentence.sentence_weights(image_data, l, h, image, [])[0]  # noqa: E731
    head_figure, layer_figure, message = image_attention.render_image(image_data, state, [], weights_of)
    attention = run.attention(layer, head, image)
    np.testing.assert_allclose(head_figure.data[0].z[1:], attention[1 + 2 * cols, 1:].reshape(rows, cols), atol=1e-6)
    expected = np.mean([run.attention(layer, h, image)[1 + 2 * cols] for h in range(run.n_heads)], axis=0)
    np.testing.assert_allclose(layer_figure.data[0].z[1:], expected[1:].reshape(rows, cols), atol=1e-6)
    assert head_figure.data[0].customdata[1 + 2][0] == 1 + 2 * cols          # a click there selects that patch
    tiled = decoded(head_figure.layout.images[0].source)
    scale = tiled.shape[0] // image_data.patches.image_pixels(image).shape[0]
    np.testing.assert_array_equal(tiled[::scale, ::scale], image_data.patches.image_pixels(image))
    assert "query r2 c0" in message and "CLS" in message
    # a selected point in another image: the query falls back to the first token
    elsewhere = ViewState(run=0, view="sentence", sentence=image, point=int(run.sentence_tokens(0).start + 3))
    assert image_attention.image_query(image_data, elsewhere) == 0

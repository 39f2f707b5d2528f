"""Every image family: attention recomputed from the stored queries and keys equals the model's own, and the
run's tables and thumbnails say where every token sits in its image."""

import numpy as np
import pytest
import torch
from support.tiny_vision import (IMAGE, PATCH, VISION_FAMILIES, max_image_attention_error, tiny_image_processor,
                                 tiny_vision_model)

import qkviz

TOLERANCE = {"float32": 1e-5, "float16": 2e-3}
PREFIX = {"vit": 1, "deit": 2, "dinov2": 1, "dinov2-registers": 4, "clip-vision": 1, "siglip-vision": 0, "clip": 1}


@pytest.fixture(scope="module")
def images():
    return qkviz.sample_images(crops=1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("family", VISION_FAMILIES)
def test_stored_vectors_reproduce_model_attention(family, dtype, tiny_vision, images, tmp_path):
    model_dir = tiny_vision(family)
    run = qkviz.extract(str(model_dir), images, tmp_path / "run", max_sentences=6, seed=2, dtype=dtype, batch_size=4,
                        progress=False)
    assert run.is_image_run and run.n_sentences == 6
    worst, departure = max_image_attention_error(run, model_dir, family, images)
    assert worst <= TOLERANCE[dtype], f"{family} {dtype}: max abs error {worst:.2e}"
    assert departure > 0.2, "attention is near uniform: the comparison would not catch an error"


@pytest.mark.parametrize("family", ["deit", "dinov2-registers", "siglip-vision"])
def test_tokens_know_their_patch_and_special_tokens_are_marked(family, tiny_vision, images, tmp_path):
    run = qkviz.extract(str(tiny_vision(family)), images, tmp_path / "run", max_sentences=3, progress=False)
    grid = IMAGE // PATCH
    tokens, prefix = run.tokens, PREFIX[family]
    assert run.image_input["grid"] == [grid, grid]
    assert len(run.image_input["prefix_tokens"]) == prefix
    assert run.n_tokens == 3 * (prefix + grid * grid)
    first = tokens[tokens.sentence == 0]
    assert first.is_special.tolist() == [True] * prefix + [False] * grid * grid
    assert (first.patch_row.to_numpy()[:prefix] == -1).all()
    np.testing.assert_array_equal(first.patch_row.to_numpy()[prefix:], np.repeat(np.arange(grid), grid))
    np.testing.assert_array_equal(first.patch_col.to_numpy()[prefix:], np.tile(np.arange(grid), grid))
    assert run.sentences.text.tolist() == [images.ids[i] for i in run.sentences.corpus_index]


def test_thumbnails_are_the_pixels_the_model_saw(tiny_vision, images, tmp_path):
    """Each patch thumbnail tiles back into the processed image (un-normalised), patch by patch."""
    family = "vit"
    run = qkviz.extract(str(tiny_vision(family)), images, tmp_path / "run", max_sentences=2, progress=False)
    processor = tiny_image_processor(family)
    index = int(run.sentences.corpus_index.iat[1])
    pixels = processor(images=[images.image(index)], return_tensors="pt")["pixel_values"][0]
    expected = ((pixels * 0.5 + 0.5) * 255).clamp(0, 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    thumbnails = run.patch_thumbnails()[run.sentence_tokens(1)]
    assert thumbnails.shape[1:] == (PATCH, PATCH, 3)           # 8-pixel patches kept whole
    assert not thumbnails[0].any()                              # CLS has no patch
    grid = IMAGE // PATCH
    tiled = thumbnails[1:].reshape(grid, grid, PATCH, PATCH, 3).transpose(0, 2, 1, 3, 4).reshape(IMAGE, IMAGE, 3)
    assert np.abs(tiled.astype(int) - expected.astype(int)).max() <= 1


def test_model_object_with_its_processor_over_pil_images(images, tmp_path):
    from PIL import Image

    model = tiny_vision_model("clip")                     # a whole CLIP model: its vision tower runs
    pictures = [Image.fromarray(images.image(index)) for index in (0, 5, 9)]
    model.train()
    run = qkviz.extract(model, pictures, tmp_path / "run", processor=tiny_image_processor("clip"), progress=False)
    assert run.family == "clip-vision" and run.n_tokens == 3 * 17
    assert run.sentences.text.tolist() == ["image 0", "image 1", "image 2"]
    assert "CLIPImageProcessor" in run.manifest["model"]["processor"]
    assert model.training and model.config._attn_implementation != "qkviz_capture"   # given back as it was


def test_same_images_reuse_the_run_and_other_images_change_it(tiny_vision, images, tmp_path):
    model_dir = str(tiny_vision("vit"))
    first = qkviz.extract(model_dir, images, tmp_path / "run", max_sentences=2, progress=False)
    again = qkviz.extract(model_dir, images, tmp_path / "run", max_sentences=2, progress=False)
    assert again.manifest["created_at"] == first.manifest["created_at"]
    arrays = [images.image(i).copy() for i in range(2)]
    arrays[0][0, 0, 0] ^= 1
    with pytest.raises(qkviz.QkvizError, match="overwrite"):
        qkviz.extract(model_dir, arrays, tmp_path / "run", progress=False)


def test_an_interrupted_image_run_resumes_to_the_same_vectors_and_thumbnails(tiny_vision, images, tmp_path,
                                                                             monkeypatch):
    import json

    from qkviz.core.errors import IncompleteRunError
    from qkviz.extraction.streaming import image_capture
    from qkviz.extraction.adapters import ModelShape
    from qkviz.extraction.streaming.chunk_capture import bytes_per_token
    from qkviz.extraction.writing.pipeline import extract_run
    from qkviz.store import files as run_files

    model = str(tiny_vision("vit"))
    reference = qkviz.extract(model, images, tmp_path / "reference", max_sentences=10, batch_size=2, progress=False)
    # Chunks of two images (one batch each); the image processor fails while the fifth chunk is prepared.
    monkeypatch.setattr(image_capture, "CHUNK_BYTES", 2 * 17 * bytes_per_token(ModelShape(2, 4, 4, 8), np.dtype("float32")))
    real_pixels = image_capture.PixelSource.pixels
    calls = []

    def failing(self, indices):
        calls.append(len(indices))
        if len(calls) == 8:            # layout, exactness gate, probe, then batch 5 = the fifth chunk
            raise KeyboardInterrupt
        return real_pixels(self, indices)

    monkeypatch.setattr(image_capture.PixelSource, "pixels", failing)
    with pytest.raises(KeyboardInterrupt):
        qkviz.extract(model, images, tmp_path / "run", max_sentences=10, batch_size=2, progress=False)
    with pytest.raises(IncompleteRunError, match="interrupted"):
        qkviz.open_run(tmp_path / "run")
    progress = json.loads((tmp_path / "run" / run_files.PROGRESS).read_text())
    assert progress["tokens_done"] == 8 * 17          # four chunks of two images were on disk
    resumed = extract_run(model, images, tmp_path / "run", max_sentences=10, batch_size=2)
    assert resumed.status == "resumed"
    np.testing.assert_array_equal(resumed.run.patch_thumbnails(), reference.patch_thumbnails())
    for layer in range(reference.n_layers):
        for head in range(reference.n_heads):
            np.testing.assert_allclose(resumed.run.queries(layer, head), reference.queries(layer, head), atol=1e-6)
            np.testing.assert_allclose(resumed.run.keys(layer, head), reference.keys(layer, head), atol=1e-6)

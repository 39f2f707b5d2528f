"""``qkviz extract --images``: an image run from the command line, and every mismatch or bad image one line, exit 2."""

import numpy as np
import pytest
from PIL import Image
from support.cli import one_line_error, run_main

import qkviz
from qkviz.store import files as run_files


@pytest.fixture()
def photos(tmp_path):
    """A folder of five RGB photos in two class folders, of different sizes."""
    rng = np.random.default_rng(0)
    for number in range(5):
        folder = tmp_path / "photos" / ("cats" if number < 3 else "dogs")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40 + number, 50, 3), dtype=np.uint8)).save(folder / f"p{number}.png")
    return tmp_path / "photos"


def test_extract_images_from_a_folder_and_an_imagefolder(tiny_vision, photos, tmp_path):
    model = str(tiny_vision("deit"))
    result = run_main("-q", "extract", "--model", model, "--images", str(photos), "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    run = qkviz.open_run(tmp_path / "run")
    assert run.n_sentences == 5 and run.n_tokens == 5 * 18
    assert run.sentences.text.tolist() == [f"cats/p{n}.png" for n in range(3)] + [f"dogs/p{n}.png" for n in (3, 4)]
    assert run.manifest["files"][run_files.PATCHES] > 0
    result = run_main("-q", "extract", "--model", model, "--images", f"imagefolder:{photos}", "--out",
                      str(tmp_path / "labelled"))
    assert result.returncode == 0, result.stderr
    assert qkviz.open_run(tmp_path / "labelled").sentences.label.tolist() == ["cats"] * 3 + ["dogs"] * 2


def test_a_text_model_given_images_and_an_image_model_given_text(tiny_model, tiny_vision, tiny_corpus, photos, tmp_path):
    result = run_main("extract", "--model", str(tiny_model("bert")), "--images", str(photos), "--out", str(tmp_path / "a"))
    one_line_error(result, "reads text", "vit")
    result = run_main("extract", "--model", str(tiny_vision("vit")), "--corpus", str(tiny_corpus), "--out",
                      str(tmp_path / "b"))
    one_line_error(result, "is an image model", "--images")
    result = run_main("extract", "--model", str(tiny_vision("vit")), "--corpus", str(tiny_corpus), "--images",
                      str(photos), "--out", str(tmp_path / "c"))
    one_line_error(result, "not both")
    assert not any((tmp_path / name).exists() for name in "abc")


def test_bad_image_folders_are_one_line(tiny_vision, tmp_path):
    model = str(tiny_vision("vit"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    one_line_error(run_main("extract", "--model", model, "--images", str(empty), "--out", str(tmp_path / "r1")),
                   "no image")
    grey = tmp_path / "grey"
    grey.mkdir()
    Image.fromarray(np.zeros((20, 20), dtype=np.uint8)).save(grey / "g.png")
    one_line_error(run_main("extract", "--model", model, "--images", str(grey), "--out", str(tmp_path / "r2")),
                   "g.png", "RGB")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    one_line_error(run_main("extract", "--model", model, "--images", str(broken), "--out", str(tmp_path / "r3")),
                   "b.png")
    assert not any((tmp_path / name).exists() for name in ("r1", "r2", "r3"))


def test_an_image_model_without_its_processor(tiny_vision, photos, tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_vision("vit"), model)
    (model / "preprocessor_config.json").unlink()
    one_line_error(run_main("extract", "--model", str(model), "--images", str(photos), "--out", str(tmp_path / "r")),
                   "image processor", "preprocessor_config.json")


def test_options_that_do_not_fit_images_are_one_line(tiny_vision, tiny_model, photos, tmp_path):
    from support.tiny_vision import tiny_image_processor, tiny_vision_model
    from transformers import AutoModel

    model = str(tiny_vision("vit"))
    one_line_error(run_main("extract", "--model", model, "--images", str(photos), "--max-tokens", "10", "--out",
                            str(tmp_path / "r1")), "no image", "17 tokens")
    one_line_error(run_main("extract", "--model", model, "--images", str(photos), "--max-length", "10", "--out",
                            str(tmp_path / "r2")), "--max-length")
    one_line_error(run_main("extract", "--model", model, "--images", " ", "--out", str(tmp_path / "r3")), "--images is empty")
    images = qkviz.load_images(photos)
    with pytest.raises(qkviz.QkvizError, match="processor= goes with a model object"):
        qkviz.extract(model, images, tmp_path / "r4", processor=tiny_image_processor("vit"))
    with pytest.raises(qkviz.QkvizError, match="give the model's image processor"):
        qkviz.extract(tiny_vision_model("vit"), images, tmp_path / "r5")
    with pytest.raises(qkviz.QkvizError, match="tokenizer= goes with a text model"):
        qkviz.extract(tiny_vision_model("vit"), images, tmp_path / "r6", tokenizer=object())
    with pytest.raises(qkviz.QkvizError, match="reads text"):
        qkviz.extract(AutoModel.from_pretrained(tiny_model("bert")), images, tmp_path / "r7")
    assert not any((tmp_path / f"r{n}").exists() for n in range(1, 8))

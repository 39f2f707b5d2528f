"""Image corpora: folders, list files, imagefolder:, in memory and scikit-image's samples; bad images one line."""

import numpy as np
import pytest
from PIL import Image

import qkviz
from qkviz.extraction.inputs.image_corpus import SAMPLE_IMAGES, is_image_source, load_images, sample_images


def save(path, array, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array, mode).save(path) if mode else Image.fromarray(array).save(path)
    return path


def rgb(seed, height=12, width=10):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def refused(source, *words):
    with pytest.raises(qkviz.QkvizError) as error:
        load_images(source)
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def test_a_folder_is_read_recursively_in_path_order_with_exact_pixels(tmp_path):
    arrays = {name: rgb(number) for number, name in enumerate(["b/two.png", "a.png", "b/c/three.PNG"])}
    for name, array in arrays.items():
        save(tmp_path / "photos" / name, array)
    (tmp_path / "photos" / "notes.txt").write_text("not an image")
    corpus = load_images(tmp_path / "photos")
    assert corpus.ids == ("a.png", "b/c/three.PNG", "b/two.png")
    assert corpus.labels == (None, None, None)
    for index, name in enumerate(corpus.ids):
        np.testing.assert_array_equal(corpus.image(index), arrays[name])


def test_imagefolder_labels_are_the_first_subfolder(tmp_path):
    save(tmp_path / "birds" / "robin" / "r1.png", rgb(1))
    save(tmp_path / "birds" / "wren" / "young" / "w1.png", rgb(2))
    save(tmp_path / "birds" / "loose.png", rgb(3))
    corpus = load_images(f"imagefolder:{tmp_path / 'birds'}")
    assert corpus.ids == ("loose.png", "robin/r1.png", "wren/young/w1.png")
    assert corpus.labels == (None, "robin", "wren")


def test_a_list_file_names_images_relative_to_itself(tmp_path):
    save(tmp_path / "imgs" / "x.png", rgb(4))
    absolute = save(tmp_path / "elsewhere" / "y.png", rgb(5))
    listing = tmp_path / "imgs" / "list.txt"
    listing.write_text(f"# my images\nx.png\n\n{absolute}\n")
    corpus = load_images(listing)
    assert corpus.ids == ("x.png", str(absolute))
    np.testing.assert_array_equal(corpus.image(1), rgb(5))
    listing.write_text("x.png\nmissing.png\n")
    refused(listing, "missing.png", "does not exist")
    listing.write_text("# nothing\n\n")
    refused(listing, "names no image")


def test_images_in_memory(tmp_path):
    floats = rgb(6) / 255.0
    corpus = load_images([Image.fromarray(rgb(7)), rgb(8), floats])
    assert corpus.ids == ("image 0", "image 1", "image 2")
    np.testing.assert_array_equal(corpus.image(0), rgb(7))
    np.testing.assert_array_equal(corpus.image(2), rgb(6))
    assert is_image_source([rgb(1)]) and is_image_source(SAMPLE_IMAGES) and is_image_source(f"imagefolder:{tmp_path}")
    assert is_image_source(tmp_path) and is_image_source(corpus)
    assert not is_image_source(["a sentence"]) and not is_image_source(str(tmp_path / "corpus.txt"))


def test_the_hash_follows_the_pixels(tmp_path):
    path = save(tmp_path / "p" / "a.png", rgb(9))
    first = load_images(tmp_path / "p").sha256
    assert load_images(tmp_path / "p").sha256 == first
    changed = rgb(9)
    changed[0, 0, 0] ^= 1
    save(path, changed)
    assert load_images(tmp_path / "p").sha256 != first
    assert load_images([rgb(9)]).sha256 != load_images([changed]).sha256


def test_bad_images_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "no image files")
    refused(save(tmp_path / "grey" / "g.png", np.zeros((12, 12), np.uint8)).parent, "g.png", "grayscale", "convert")
    refused(save(tmp_path / "alpha" / "a.png", np.zeros((12, 12, 4), np.uint8)).parent, "a.png", "RGBA", "RGB")
    broken = tmp_path / "broken" / "b.png"
    broken.parent.mkdir()
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    refused(broken.parent, "b.png", "cannot be read")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "f.jpg").write_text("text pretending to be a picture")
    refused(tmp_path / "fake", "f.jpg")
    refused(save(tmp_path / "tiny" / "t.png", rgb(1, 4, 4)).parent, "4 x 4", "at least")
    refused([rgb(1), None], "image 1", "missing")
    refused([rgb(1), np.zeros((5, 9, 9), np.uint8)], "image 1", "shape")
    refused([np.full((9, 9, 3), 300, np.int32)], "int32")
    refused([], "empty")
    refused(tmp_path / "nowhere" / "x.png", "no such")
    refused("some-dataset-name", "datasets")


def test_truncated_pixels_fail_when_decoded_with_the_file_named(tmp_path):
    path = save(tmp_path / "cut" / "c.png", rgb(10, 64, 64))
    corpus = load_images(tmp_path / "cut")
    path.write_bytes(path.read_bytes()[:200])            # the header still reads, the pixels do not
    with pytest.raises(qkviz.QkvizError, match="c.png"):
        corpus.image(0)


def test_sample_images_are_real_rgb_pictures_and_their_crops():
    corpus = sample_images(crops=2)
    assert len(corpus) == 8 * 5 and len(set(corpus.ids)) == len(corpus)
    assert corpus.ids[:2] == ("astronaut", "astronaut#crop r0 c0")
    whole, crop = corpus.image(0), corpus.image(1)
    assert whole.dtype == np.uint8 and whole.shape == (512, 512, 3)
    np.testing.assert_array_equal(crop, whole[:256, :256])
    assert whole.std() > 20                                       # a photograph, not a flat image
    assert sample_images(crops=2).sha256 == corpus.sha256 != sample_images(crops=1).sha256
    assert load_images(SAMPLE_IMAGES).ids == corpus.ids

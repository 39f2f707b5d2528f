"""Reading an image corpus: a folder, a list file, ``imagefolder:DIR``, scikit-image's samples, or images in memory.

* a folder: every image file in it, recursively, sorted by relative path (ids: the relative paths);
* a list file (``.txt`` / ``.lst``): one image path per line, relative to the list's folder or absolute
  (blank lines and ``#`` comments skipped; ids: the paths as written);
* ``imagefolder:DIR``: as Hugging Face's ``imagefolder``: images under DIR, the class label the first
  subfolder's name;
* :data:`SAMPLE_IMAGES` (``"skimage-samples"``): :func:`sample_images`;
* in memory: PIL images and ``H x W x 3`` uint8 arrays (float arrays in [0, 1] are rounded to uint8;
  ids ``image 0``, ``image 1``, ...), or a ``datasets.Dataset`` with an ``image`` column (and ``label``);
* any other name: a Hugging Face dataset ``name[:split]`` with an ``image`` column, through ``datasets``.

Every image must be RGB: a grayscale, RGBA, palette or CMYK image is refused with how to convert it,
before any model work (headers are read when the corpus loads; pixels are decoded when the model
needs them). The corpus hash covers the ids and every image's bytes (a file's bytes, an array's pixels).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.extraction.inputs.corpus import load_hub_dataset

SAMPLE_IMAGES = "skimage-samples"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
LIST_SUFFIXES = (".txt", ".lst")
IMAGEFOLDER = "imagefolder:"
MAX_IMAGES = 1_000_000
MAX_IMAGE_BYTES = 200_000_000
MIN_SIDE = 8
#: scikit-image's RGB samples inside its wheel (no download); ``cat`` is ``chelsea`` again, ``logo`` is RGBA
SKIMAGE_SAMPLES = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina",
                   "colorwheel")


@dataclass(frozen=True)
class ImageCorpus:
    """Images with unique ids (and class labels), decoded one at a time when asked for."""

    source: str
    ids: tuple[str, ...]
    labels: tuple[str | None, ...]
    _loaders: tuple[Callable[[], np.ndarray], ...] = field(repr=False)
    _digest: str = field(repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def image(self, index: int) -> np.ndarray:
        """``H x W x 3`` uint8 RGB pixels of image ``index``."""
        return self._loaders[index]()

    @property
    def sha256(self) -> str:
        return self._digest


def is_image_source(source) -> bool:
    """Whether :func:`load_images` (rather than the text corpus reader) takes ``source``."""
    if isinstance(source, ImageCorpus):
        return True
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        return text == SAMPLE_IMAGES or text.startswith(IMAGEFOLDER) or Path(text).is_dir()
    if isinstance(source, (list, tuple)) and source:
        return _is_picture(source[0])
    return False


def load_images(source) -> ImageCorpus:
    """The images of ``source`` (see the module); every failure is a one-line :class:`QkvizError`."""
    if isinstance(source, ImageCorpus):
        return source
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        if text == SAMPLE_IMAGES:
            return sample_images()
        if text.startswith(IMAGEFOLDER):
            return _folder(Path(text[len(IMAGEFOLDER):]).expanduser(), text, labelled=True)
        path = Path(text).expanduser()
        if path.is_dir():
            return _folder(path, text, labelled=False)
        if path.is_file():
            return _list_file(path)
        if path.suffix.lower() in IMAGE_SUFFIXES + LIST_SUFFIXES or text.startswith((".", "/", "~")):
            raise QkvizError(f"images {text}: no such folder or file")
        return _hub_dataset(text)
    if hasattr(source, "column_names"):
        return _dataset(source, f"{type(source).__name__} in memory")
    if isinstance(source, (bytes, bytearray, dict)) or not hasattr(source, "__iter__"):
        raise QkvizError(f"images given as a {type(source).__name__}; give a folder, a list file, imagefolder:DIR, "
                         f"{SAMPLE_IMAGES}, or a list of PIL images / H x W x 3 uint8 arrays")
    return _in_memory(list(source))


def sample_images(crops: int = 2) -> ImageCorpus:
    """scikit-image's bundled RGB sample images, each whole and cut into a ``crops x crops`` grid: ``8 * (1 +
    crops**2)`` images (labels: the sample's name). Model and dataset hubs are out of reach here, so this is the
    real image corpus the tests and the docs use."""
    try:
        from skimage import data
    except ImportError:
        raise QkvizError("the sample images need scikit-image: pip install 'qkviz[vision]'") from None
    if not 0 <= crops <= 8:
        raise QkvizError(f"crops={crops}: give 0 to 8 crops a side")
    ids, labels, loaders = [], [], []
    for name in SKIMAGE_SAMPLES:
        whole = getattr(data, name)
        height, width = whole().shape[:2]
        ids.append(name)
        labels.append(name)
        loaders.append(lambda whole=whole: np.ascontiguousarray(whole()[..., :3]))
        for row in range(crops):
            for col in range(crops):
                box = (row * height // crops, (row + 1) * height // crops, col * width // crops,
                       (col + 1) * width // crops)
                ids.append(f"{name}#crop r{row} c{col}")
                labels.append(name)
                loaders.append(lambda whole=whole, box=box: np.ascontiguousarray(whole()[box[0]:box[1], box[2]:box[3], :3]))
    digest = hashlib.sha256(f"{SAMPLE_IMAGES} crops={crops} {' '.join(SKIMAGE_SAMPLES)}".encode())
    return ImageCorpus(f"{SAMPLE_IMAGES} (scikit-image, {crops} x {crops} crops)", tuple(ids), tuple(labels),
                       tuple(loaders), digest.hexdigest())


def _is_picture(item) -> bool:
    return isinstance(item, np.ndarray) or type(item).__module__.startswith("PIL.")


def _folder(folder: Path, source: str, labelled: bool) -> ImageCorpus:
    if not folder.is_dir():
        raise QkvizError(f"images {source}: {folder} is not a folder")
    paths = sorted((path for path in folder.rglob("*") if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES),
                   key=lambda path: path.relative_to(folder).as_posix())
    if not paths:
        raise QkvizError(f"folder {folder} has no image files ({', '.join(IMAGE_SUFFIXES)}); give a folder of images "
                         "(a text corpus is a file, not a folder)")
    ids = [path.relative_to(folder).as_posix() for path in paths]
    labels = [(parts[0] if len(parts) > 1 else None) if labelled else None for parts in (i.split("/") for i in ids)]
    return _files(paths, ids, labels, source)


def _list_file(path: Path) -> ImageCorpus:
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return _files([path], [path.name], [None], str(path))
    if path.suffix.lower() not in LIST_SUFFIXES:
        raise QkvizError(f"images {path}: give a folder of images, a list file ({', '.join(LIST_SUFFIXES)}) or "
                         "imagefolder:DIR")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise QkvizError(f"image list {path} is not UTF-8 text; give one image path per line") from None
    written = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not written:
        raise QkvizError(f"image list {path} names no image; give one image path per line")
    paths = [Path(line).expanduser() if Path(line).expanduser().is_absolute() else path.parent / line for line in written]
    for line, image_path in zip(written, paths):
        if not image_path.is_file():
            raise QkvizError(f"image list {path} names {line}, which does not exist")
    return _files(paths, written, [None] * len(paths), str(path))


def _files(paths: list[Path], ids: list[str], labels: list, source: str) -> ImageCorpus:
    if len(paths) > MAX_IMAGES:
        raise QkvizError(f"images {source}: {len(paths):,} images, more than qkviz reads ({MAX_IMAGES:,}); give a sample")
    digest = hashlib.sha256()
    for image_id, path in zip(ids, paths):
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise QkvizError(f"image {path} is {size / 1e6:.0f} MB, more than qkviz reads ({MAX_IMAGE_BYTES / 1e6:.0f} MB)")
        _check_header(path)
        digest.update(image_id.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return ImageCorpus(source, tuple(ids), tuple(labels), tuple(lambda path=path: _decode(path) for path in paths),
                       digest.hexdigest())


def _check_header(path: Path) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            mode, size = image.mode, image.size
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise QkvizError(f"image {path} cannot be read ({type(error).__name__}); replace or remove it") from None
    _check_mode(mode, str(path))
    _check_size(size[1], size[0], str(path))


def _check_mode(mode: str, where: str) -> None:
    if mode != "RGB":
        kind = {"L": "grayscale", "LA": "grayscale with alpha", "RGBA": "RGB with alpha", "P": "palette",
                "CMYK": "CMYK", "I;16": "16-bit grayscale", "I": "32-bit grayscale", "1": "black and white"}.get(mode, mode)
        raise QkvizError(f"image {where} is {kind} (mode {mode}), not RGB; convert it (PIL: image.convert('RGB')) "
                         "or leave it out")


def _check_size(height: int, width: int, where: str) -> None:
    if min(height, width) < MIN_SIDE:
        raise QkvizError(f"image {where} is {width} x {height} pixels; qkviz needs at least {MIN_SIDE} x {MIN_SIDE}")


def _decode(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as image:
            _check_mode(image.mode, str(path))
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError) as error:
        raise QkvizError(f"image {path} cannot be decoded ({type(error).__name__}: {error}); replace or remove it") from None


def _as_pixels(item, where: str) -> np.ndarray:
    """An in-memory image as ``H x W x 3`` uint8 (PIL RGB, uint8 arrays, float arrays in [0, 1])."""
    if type(item).__module__.startswith("PIL."):
        _check_mode(item.mode, where)
        array = np.asarray(item, dtype=np.uint8)
    elif isinstance(item, np.ndarray):
        if item.ndim != 3 or item.shape[2] != 3:
            raise QkvizError(f"{where} is an array of shape {item.shape}; give H x W x 3 RGB pixels")
        if item.dtype == np.uint8:
            array = item
        elif np.issubdtype(item.dtype, np.floating) and np.isfinite(item).all() and item.min() >= 0 and item.max() <= 1:
            array = np.round(item * 255).astype(np.uint8)
        else:
            raise QkvizError(f"{where} is a {item.dtype} array; give uint8 pixels (0-255) or floats in [0, 1]")
    else:
        shown = "missing" if item is None else type(item).__name__
        raise QkvizError(f"{where} is {shown}, not an image; give PIL images or H x W x 3 uint8 arrays")
    _check_size(array.shape[0], array.shape[1], where)
    return np.ascontiguousarray(array)


def _in_memory(items: list, labels: list | None = None, source: str | None = None) -> ImageCorpus:
    if not items:
        raise QkvizError("images: the list is empty; give PIL images or H x W x 3 uint8 arrays")
    if len(items) > MAX_IMAGES:
        raise QkvizError(f"images: {len(items):,} images, more than qkviz reads ({MAX_IMAGES:,}); give a sample")
    pixels = [_as_pixels(item, f"image {index}") for index, item in enumerate(items)]
    ids = tuple(f"image {index}" for index in range(len(pixels)))
    digest = hashlib.sha256()
    for image_id, array in zip(ids, pixels):
        digest.update(image_id.encode() + b"\0" + str(array.shape).encode() + array.tobytes())
    return ImageCorpus(source or f"{len(pixels)} images in memory", ids, tuple(labels or [None] * len(pixels)),
                       tuple(lambda array=array: array for array in pixels), digest.hexdigest())


def _dataset(dataset, source: str) -> ImageCorpus:
    if "image" not in dataset.column_names:
        raise QkvizError(f"dataset {source} has no 'image' column (columns: {', '.join(dataset.column_names)})")
    labels = [str(label) for label in dataset["label"]] if "label" in dataset.column_names else None
    return _in_memory(list(dataset["image"]), labels, source)


def _hub_dataset(name: str) -> ImageCorpus:
    return _dataset(load_hub_dataset(name, "images"), name)

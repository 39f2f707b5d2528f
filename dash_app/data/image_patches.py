"""An image run's pixels as the app shows them: one patch's thumbnail, and a whole image tiled from its patches.

Every token of an image run has its patch's thumbnail in the run (:meth:`qkviz.Run.patch_thumbnails`: the
pixels the model saw, ``t x t`` each); an image is its patches tiled row by row. Both are encoded as PNG data
URIs, small (a patch 64 px, an image ``rows x cols x t`` px), from the memory-mapped thumbnails: no model,
no projection, a few milliseconds.
"""

from __future__ import annotations

import base64
import io

import numpy as np

#: pixels a side of a patch shown on hover (the thumbnail enlarged, kept sharp)
PATCH_PX = 64
#: pixels a side an image is enlarged to at least (a browser smooths a small image it stretches)
IMAGE_PX = 448


def png_uri(pixels: np.ndarray, size: tuple[int, int] | None = None) -> str:
    """``H x W x 3`` uint8 pixels as a PNG data URI, enlarged to ``size`` (width, height) without smoothing."""
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(pixels))
    if size is not None:
        image = image.resize(size, Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class ImagePatches:
    """An image run's thumbnails and layout (``run.image_input``), read once per app."""

    def __init__(self, run):
        self.thumbnails = run.patch_thumbnails()                  # [token, t, t, 3] uint8, memory-mapped
        layout = run.image_input
        self.rows, self.cols = (int(n) for n in layout["grid"])
        self.prefix = tuple(layout["prefix_tokens"])
        self.first_token = run.sentences.first_token.to_numpy()
        self.ids = run.sentences.text.to_numpy()

    @property
    def size(self) -> int:
        return int(self.thumbnails.shape[1])

    def patch_uri(self, token: int) -> str:
        """The token's patch, enlarged to :data:`PATCH_PX` (a special token's is black: it has no patch)."""
        return png_uri(self.thumbnails[token], (PATCH_PX, PATCH_PX))

    def image_pixels(self, image: int) -> np.ndarray:
        """``[rows * t, cols * t, 3]`` uint8: the image's patches tiled row by row."""
        start = int(self.first_token[image]) + len(self.prefix)
        patches = np.asarray(self.thumbnails[start:start + self.rows * self.cols])
        t = self.size
        return patches.reshape(self.rows, self.cols, t, t, 3).transpose(0, 2, 1, 3, 4).reshape(self.rows * t, self.cols * t, 3)

    def image_uri(self, image: int) -> str:
        """The tiled image, enlarged without smoothing to at least :data:`IMAGE_PX` a side (patch edges stay sharp)."""
        pixels = self.image_pixels(image)
        scale = max(1, -(-IMAGE_PX // max(pixels.shape[:2])))
        return png_uri(pixels, (pixels.shape[1] * scale, pixels.shape[0] * scale))

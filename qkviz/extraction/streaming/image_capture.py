"""Running a vision transformer over images and streaming its queries and keys to the store.

An image is a sequence of ``len(prefix)`` special tokens (CLS, distillation, registers: the adapter's
``prefix_tokens``) and ``rows x cols`` patches, row by row, all of them real (no padding, no mask). The
model's own image processor prepares every image (resizing, cropping, normalising); the patch
thumbnails are cut from those same processed pixels, un-normalised, so a thumbnail is exactly the
pixels its token saw, at most :data:`THUMBNAIL` pixels a side.

Images are taken in chunks of whole images (bounded by ``CHUNK_BYTES`` of vectors, as text), each
chunk captured in batches, written at once and checkpointed; a resumed run recomputes only the
thumbnails (the image processor, not the model) of the chunks already on disk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerAttentionSettings, LayerCalls, capturing
from qkviz.extraction.streaming.chunk_capture import (CHUNK_BYTES, MAX_OFFSET_POSITIONS, ChunkBuffers, Scatter, attention_layers,
                                            bytes_per_token, progress_bar, recording, store_chunk)
from qkviz.store.run_writer import RunWriter
from qkviz.extraction.capture.forward_pass import forward

logger = logging.getLogger(__name__)

#: the largest side of a stored patch thumbnail, in pixels (a larger patch is averaged down to it)
THUMBNAIL = 16


@dataclass(frozen=True)
class ImageLayout:
    """Where each token of an image sits: the special tokens, then a ``rows x cols`` grid of patches."""

    prefix: tuple[str, ...]
    rows: int
    cols: int
    patch_size: int
    thumbnail: int

    @property
    def n_patches(self) -> int:
        return self.rows * self.cols

    @property
    def n_tokens(self) -> int:
        return len(self.prefix) + self.n_patches

    def as_manifest(self) -> dict:
        return {"modality": "image", "prefix_tokens": list(self.prefix), "grid": [self.rows, self.cols],
                "patch_size": self.patch_size, "image_size": [self.rows * self.patch_size, self.cols * self.patch_size],
                "thumbnail": self.thumbnail}


def image_layout(adapter: FamilyAdapter, config, pixel_values: torch.Tensor) -> ImageLayout:
    """The layout of images of ``pixel_values``' size ``[batch, 3, H, W]`` for this model."""
    patch = config.patch_size if isinstance(config.patch_size, int) else config.patch_size[0]
    height, width = pixel_values.shape[-2:]
    if height % patch or width % patch:
        raise QkvizError(f"the image processor gives {height} x {width} pixel images, not a whole number of "
                         f"{patch}-pixel patches; use the model's own image processor")
    return ImageLayout(tuple(adapter.prefix_tokens(config)), height // patch, width // patch, int(patch),
                       min(int(patch), THUMBNAIL))


class PixelSource:
    """The processed pixels of a corpus's images, batch by batch, with their thumbnails."""

    def __init__(self, processor, corpus, dtype: torch.dtype, device: str):
        self.processor, self.corpus, self.dtype, self.device = processor, corpus, dtype, device

    def pixels(self, indices) -> torch.Tensor:
        """``[batch, 3, H, W]``: what the model reads for the corpus images ``indices``."""
        images = [self.corpus.image(int(index)) for index in indices]
        try:
            values = self.processor(images=images, return_tensors="pt")["pixel_values"]
        except (ValueError, TypeError, KeyError) as error:
            raise QkvizError(f"the image processor cannot prepare these images ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else 'no detail'}); give the model's own "
                             "image processor") from None
        return values.to(device=self.device, dtype=self.dtype)

    def thumbnails(self, pixel_values: torch.Tensor, layout: ImageLayout) -> np.ndarray:
        """``[batch, patch, t, t, 3]`` uint8: each patch of the processed images, un-normalised, averaged down."""
        pixels = pixel_values.float().cpu()
        if getattr(self.processor, "do_normalize", False):
            mean = torch.tensor(_per_channel(self.processor.image_mean)).view(1, 3, 1, 1)
            std = torch.tensor(_per_channel(self.processor.image_std)).view(1, 3, 1, 1)
            pixels = pixels * std + mean
        if getattr(self.processor, "do_rescale", False):
            pixels = pixels / float(self.processor.rescale_factor)
        else:
            pixels = pixels * 255.0
        t = layout.thumbnail
        small = torch.nn.functional.adaptive_avg_pool2d(pixels, (layout.rows * t, layout.cols * t))
        grid = small.clamp(0, 255).round().to(torch.uint8).numpy()           # [batch, 3, rows t, cols t]
        grid = grid.reshape(len(grid), 3, layout.rows, t, layout.cols, t)
        return grid.transpose(0, 2, 4, 3, 5, 1).reshape(len(grid), layout.n_patches, t, t, 3)


def _per_channel(values) -> list[float]:
    values = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    return values * 3 if len(values) == 1 else values


def chunk_images(n_images: int, tokens_per_image: int, max_tokens: int) -> list[tuple[int, int, int]]:
    """``(first image, end image, first token)`` of chunks of whole images, at most ``max_tokens`` tokens each."""
    per_chunk = max(1, max_tokens // tokens_per_image)
    return [(first, min(first + per_chunk, n_images), first * tokens_per_image)
            for first in range(0, n_images, per_chunk)]


def capture_images(model, adapter: FamilyAdapter, shape: ModelShape, source: PixelSource, selected: np.ndarray,
                   layout: ImageLayout, writer: RunWriter, batch_size: int, progress: bool
                   ) -> tuple[dict[int, LayerAttentionSettings], ImageLayout, np.ndarray]:
    """Capture every selected image (corpus indices) not yet on disk; return each layer's attention settings,
    the image layout and every token's thumbnail ``[token, t, t, 3]`` uint8 (zeros for the special tokens)."""
    layer_of_module = attention_layers(model, adapter, shape)
    first_pixels = source.pixels(selected[:1])
    with torch.inference_mode():
        settings = probe_image_layers(model, layer_of_module, first_pixels, shape, layout)
    n_tokens = len(selected) * layout.n_tokens
    if writer.layout.n_tokens != n_tokens:
        raise RuntimeError(f"the run was planned for {writer.layout.n_tokens} tokens, the images have {n_tokens}")
    store_dtype = np.dtype(writer.layout.dtype)
    chunks = chunk_images(len(selected), layout.n_tokens, CHUNK_BYTES // bytes_per_token(shape, store_dtype))
    largest = max(end - first for first, end, _ in chunks) * layout.n_tokens
    scatter = Scatter(ChunkBuffers.allocate(shape, largest, store_dtype, writer.layout.head_update,
                                            writer.layout.output_norms), writer.offsets,
                      min(MAX_OFFSET_POSITIONS, layout.n_tokens))
    thumbnails = np.zeros((len(selected), layout.n_tokens, layout.thumbnail, layout.thumbnail, 3), dtype=np.uint8)
    bar = progress_bar(writer, progress)
    with recording(model, adapter, shape, layer_of_module, scatter, writer.layout.head_update,
                   writer.layout.output_norms):
        for first, end, first_token in chunks:
            done = first_token + (end - first) * layout.n_tokens <= writer.tokens_done
            for start in range(first, end, batch_size):
                members = np.arange(start, min(start + batch_size, end))
                pixels = source.pixels(selected[members])
                if tuple(pixels.shape[-2:]) != tuple(first_pixels.shape[-2:]):
                    raise QkvizError(f"the image processor gives images of different sizes ({tuple(pixels.shape[-2:])} "
                                     f"and {tuple(first_pixels.shape[-2:])}); use a processor that resizes or crops "
                                     "every image to one size")
                thumbnails[members, len(layout.prefix):] = source.thumbnails(pixels, layout)
                if done:
                    continue
                rows = (members[:, None] - first) * layout.n_tokens + np.arange(layout.n_tokens)
                scatter.set_batch(torch.ones(len(members), layout.n_tokens, dtype=torch.long, device=pixels.device),
                                  rows.reshape(-1))
                forward(model, pixel_values=pixels)
                bar.update(len(members) * layout.n_tokens)
            if done:
                continue
            store_chunk(writer, scatter, first_token, (end - first) * layout.n_tokens)
            bar.set_postfix(images=end, refresh=False)
    bar.close()
    return settings, layout, thumbnails.reshape(n_tokens, layout.thumbnail, layout.thumbnail, 3)


def probe_image_layers(model, layer_of_module: LayerCalls, pixels: torch.Tensor, shape: ModelShape,
                       layout: ImageLayout) -> dict[int, LayerAttentionSettings]:
    """One forward pass on one image: every layer is captured with ``layout.n_tokens`` tokens and the
    expected heads; returns each layer's attention settings."""
    seen: dict[int, tuple] = {}

    def inspect(layer, queries, keys, value_norms):
        seen[layer] = (tuple(queries.shape[1:]), tuple(keys.shape[1:]))

    recorder = AttentionRecorder(layer_of_module, inspect)
    with capturing(model, recorder):
        forward(model, pixel_values=pixels)
    expected = ((shape.n_heads, layout.n_tokens, shape.head_dim), (shape.n_kv_heads, layout.n_tokens, shape.head_dim))
    if sorted(seen) != list(range(shape.n_layers)) or any(v != expected for v in seen.values()):
        raise RuntimeError(f"captured (heads, tokens, d_head) per layer {seen} do not match the model's {shape} "
                           f"with {layout.n_tokens} tokens an image")
    return dict(recorder.settings)

"""Tiny randomly initialised vision transformers of every supported image family, with their image processors.

32 x 32 pixel images in 8-pixel patches (a 4 x 4 grid), 2 layers x 4 heads. Query and key weights are
drawn wide so that attention is far from uniform and an error in the captured vectors shows. Each family
gets the image processor class its real checkpoints use (resize, centre crop, normalisation differ).
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

IMAGE = 32
PATCH = 8
HIDDEN = 32
HEADS = 4
LAYERS = 2
QUERY_KEY_STD = 0.25

VISION_FAMILIES = ("vit", "deit", "dinov2", "dinov2-registers", "clip-vision", "siglip-vision", "clip")


def tiny_vision_config(family: str):
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, image_size=IMAGE,
                  patch_size=PATCH)
    if family == "vit":
        return transformers.ViTConfig(**common, intermediate_size=2 * HIDDEN, qkv_bias=True)
    if family == "deit":
        return transformers.DeiTConfig(**common, intermediate_size=2 * HIDDEN)
    if family == "dinov2":
        return transformers.Dinov2Config(**common, mlp_ratio=2)
    if family == "dinov2-registers":
        return transformers.Dinov2WithRegistersConfig(**common, mlp_ratio=2, num_register_tokens=3)
    if family == "clip-vision":
        return transformers.CLIPVisionConfig(**common, intermediate_size=2 * HIDDEN)
    if family == "siglip-vision":
        return transformers.SiglipVisionConfig(**common, intermediate_size=2 * HIDDEN)
    if family == "clip":   # a whole CLIP checkpoint: qkviz reads its vision tower
        return transformers.CLIPConfig(
            vision_config=dict(common, intermediate_size=2 * HIDDEN),
            text_config=dict(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=HEADS,
                             intermediate_size=2 * HIDDEN, vocab_size=64), projection_dim=16)
    raise ValueError(family)


def tiny_image_processor(family: str):
    """The processor class the family's real checkpoints ship, set to :data:`IMAGE` pixels."""
    if family in ("vit", "deit"):
        return transformers.ViTImageProcessor(size={"height": IMAGE, "width": IMAGE})
    if family.startswith("dinov2"):
        return transformers.BitImageProcessor(size={"shortest_edge": IMAGE + 4}, crop_size={"height": IMAGE, "width": IMAGE},
                                              image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    if family in ("clip-vision", "clip"):
        return transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})
    if family == "siglip-vision":
        return transformers.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE})
    raise ValueError(family)


def tiny_vision_model(family: str, seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(tiny_vision_config(family))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("q_proj", "k_proj")):
                parameter.normal_(0.0, QUERY_KEY_STD)
    return model.eval()


def build_tiny_vision_model(family: str, directory: Path, seed: int = 0) -> Path:
    """Save a tiny ``family`` model with its image processor in ``directory`` and return it."""
    tiny_vision_model(family, seed).save_pretrained(directory)
    tiny_image_processor(family).save_pretrained(directory)
    return directory


def model_attentions(model_dir: Path, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The model's own eager attention probabilities ``[layer][image, head, query, key]``."""
    model = transformers.AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    if getattr(model.config, "model_type", None) == "clip":
        model = model.vision_model
    with torch.no_grad():
        return model(pixel_values=pixel_values, output_attentions=True).attentions


def max_image_attention_error(run, model_dir: Path, family: str, images) -> tuple[float, float]:
    """Largest |recomputed - model| over every layer, head and image of ``run`` (the model run on the same
    images through the family's processor, in one batch), and the largest departure of the model's
    attention from uniform (to show that the comparison is not between two near-uniform matrices)."""
    import numpy as np

    chosen = run.sentences.corpus_index.to_numpy()
    processor = transformers.AutoImageProcessor.from_pretrained(model_dir)
    pixels = processor(images=[images.image(int(i)) for i in chosen], return_tensors="pt")["pixel_values"]
    attentions = model_attentions(model_dir, pixels)
    worst, departure = 0.0, 0.0
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for image in range(run.n_sentences):
                theirs = attentions[layer][image, head].double().numpy()
                worst = max(worst, float(np.abs(run.attention(layer, head, image) - theirs).max()))
                departure = max(departure, float(np.abs(theirs - 1 / theirs.shape[-1]).max()))
    return worst, departure

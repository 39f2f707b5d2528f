"""Vision transformers: ViT, DeiT, DINOv2 (with and without registers) and the vision towers of CLIP and SigLIP, one
declaration per model type.

An image is a sequence: the family's special tokens (CLS; DeiT's distillation token; DINOv2's registers)
then one token per patch, row by row. Every layer attends bidirectionally over the whole sequence, with
``head_dim ** -0.5`` and no mask, through the Hugging Face attention interface, so queries and keys are
captured exactly as for text (:mod:`qkviz.extraction.capture.recorder`). A whole CLIP or SigLIP checkpoint is
reduced to its vision tower (:mod:`qkviz.extraction.adapters.vision_tower`); its text tower is not read.
"""

from __future__ import annotations

from qkviz.extraction.families.adapter import FamilyAdapter
from qkviz.extraction.families.declaration import exact


def _registers(config) -> tuple[str, ...]:
    return ("CLS", *(f"REG{number}" for number in range(1, int(config.num_register_tokens) + 1)))


def _vision(family: str, architectures: tuple[str, ...], description: str, *,
            layers_path: str, attention_path: str, output_projection_path: str,
            prefix_tokens=lambda config: ("CLS",)) -> FamilyAdapter:
    return FamilyAdapter(
        family=family,
        model_types=(),         # those of the declarations that name it (the catalogue)
        architectures=architectures,
        layers_path=layers_path,
        attention_path=attention_path,
        output_projection_path=output_projection_path,
        causal=False,
        description=description,
        modality="image",
        prefix_tokens=prefix_tokens,
    )


def _vit_layout(family, architectures, description, layers_path="layers", prefix_tokens=lambda c: ("CLS",)):
    return _vision(family, architectures, description, layers_path=layers_path,
                   attention_path="attention", output_projection_path="attention.o_proj",
                   prefix_tokens=prefix_tokens)


VIT = _vit_layout("vit", ("ViTModel", "ViTForImageClassification"),
                  "ViT image encoders (e.g. google/vit-base-patch16-224): CLS + patches")
DEIT = _vit_layout("deit", ("DeiTModel", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher"),
                   "DeiT image encoders (e.g. facebook/deit-base-distilled-patch16-224): CLS, distillation token, patches",
                   prefix_tokens=lambda config: ("CLS", "DIST"))
DINOV2 = _vit_layout("dinov2", ("Dinov2Model",),
                     "DINOv2 image encoders (e.g. facebook/dinov2-small): CLS + patches", layers_path="encoder.layer")
DINOV2_REGISTERS = _vit_layout("dinov2-registers", ("Dinov2WithRegistersModel",),
                               "DINOv2 with registers (e.g. facebook/dinov2-with-registers-small): CLS, registers, "
                               "patches", layers_path="encoder.layer", prefix_tokens=_registers)
CLIP_VISION = _vision("clip-vision", ("CLIPVisionModel",),
                      "CLIP's vision tower (e.g. openai/clip-vit-base-patch32): CLS + patches",
                      layers_path="encoder.layers", attention_path="self_attn",
                      output_projection_path="self_attn.out_proj")
SIGLIP_VISION = _vision("siglip-vision", ("SiglipVisionModel",),
                        "SigLIP's vision tower (e.g. google/siglip-base-patch16-224): patches only",
                        layers_path="encoder.layers", attention_path="self_attn",
                        output_projection_path="self_attn.out_proj", prefix_tokens=lambda config: ())

DECLARATIONS = (
    exact("vit", "an image: CLS + patches", in_table=False, adapter=VIT),
    exact("deit", "an image: CLS, distillation token, patches", in_table=False, adapter=DEIT),
    exact("dinov2", "an image: CLS + patches", in_table=False, adapter=DINOV2),
    exact("dinov2_with_registers", "an image: CLS, registers, patches", in_table=False, adapter=DINOV2_REGISTERS),
    exact("clip_vision_model", "an image: CLS + patches", in_table=False, adapter=CLIP_VISION),
    exact("siglip_vision_model", "an image: patches only", in_table=False, adapter=SIGLIP_VISION),
    # a whole checkpoint, text tower beside the vision tower: qkviz reads the vision tower (the types above)
    exact("clip", "its vision tower", in_table=False, vision_tower=True),
    exact("siglip", "its vision tower", in_table=False, vision_tower=True),
)

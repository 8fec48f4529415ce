"""The models ddptop knows by name, and what input each can take. Standard library only: the plan reads it
without torch, the kernels build from it (``ddptop.protocol.modelspec`` says which spec is which kind).

Smallest image sizes were measured once with torchvision 0.29 (a forward pass at growing square sizes);
ddptop asks for at least 32 px everywhere so the last BatchNorm of a CNN never sees a 1x1 map.
Any other model runs through a factory (``package.module:factory`` or ``path/to/file.py:factory``) (a torchvision builder works too, e.g.
``torchvision.models:regnet_y_128gf``: a builder taking ``**kwargs`` is given ``num_classes`` alone).

The transformer presets (``bench_kernels.transformer``) are decoder-only language models taking token ids of
a sequence length (``--seq-len``) up to their context length; an image size means nothing to them.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR_IMAGE_SIZE = 32

# name -> (family, smallest square image size in pixels, patch size or None)
TORCHVISION_MODELS: dict[str, tuple[str, int, int | None]] = {
    "resnet18": ("resnet", 32, None),
    "resnet34": ("resnet", 32, None),
    "resnet50": ("resnet", 32, None),
    "resnet101": ("resnet", 32, None),
    "resnet152": ("resnet", 32, None),
    "resnext50_32x4d": ("resnet", 32, None),
    "resnext101_32x8d": ("resnet", 32, None),
    "wide_resnet50_2": ("resnet", 32, None),
    "vgg11": ("vgg", 32, None),
    "vgg16": ("vgg", 32, None),
    "vgg19": ("vgg", 32, None),
    "vgg16_bn": ("vgg", 32, None),
    "alexnet": ("alexnet", 64, None),
    "densenet121": ("densenet", 32, None),
    "densenet169": ("densenet", 32, None),
    "squeezenet1_0": ("squeezenet", 32, None),
    "squeezenet1_1": ("squeezenet", 32, None),
    "mobilenet_v2": ("mobilenet", 32, None),
    "mobilenet_v3_small": ("mobilenet", 32, None),
    "mobilenet_v3_large": ("mobilenet", 32, None),
    "efficientnet_b0": ("efficientnet", 32, None),
    "shufflenet_v2_x1_0": ("shufflenet", 32, None),
    "googlenet": ("googlenet", 32, None),
    "inception_v3": ("inception", 80, None),
    "convnext_tiny": ("convnext", 32, None),
    "regnet_y_400mf": ("regnet", 32, None),
    "mnasnet1_0": ("mnasnet", 32, None),
    "vit_b_16": ("vit", 32, 16),
    "vit_b_32": ("vit", 32, 32),
    "swin_t": ("swin", 32, None),
}


@dataclass(frozen=True)
class TransformerShape:
    """A decoder-only language model's shape (``bench_kernels.transformer.GPT``): GPT-2's layout."""

    layers: int
    d_model: int
    heads: int
    vocab: int
    context: int  # the longest sequence: the learned position table's rows
    default_seq_len: int  # --seq-len when not given

    @property
    def params(self) -> int:
        """Trainable parameters: per block 12 d^2 + 13 d (attention and MLP weights, biases, two LayerNorms),
        the token table (tied with the LM head), the position table and the final LayerNorm."""
        d = self.d_model
        return self.layers * (12 * d * d + 13 * d) + self.vocab * d + self.context * d + 2 * d


# name -> shape: from a few M parameters (fast tests) to GPT-2 medium (24 layers, d=1024, 16 heads)
TRANSFORMER_PRESETS: dict[str, TransformerShape] = {
    "gpt-tiny": TransformerShape(layers=4, d_model=256, heads=4, vocab=4096, context=256, default_seq_len=128),
    "gpt-20m": TransformerShape(layers=8, d_model=384, heads=6, vocab=16384, context=512, default_seq_len=256),
    "gpt-125m": TransformerShape(layers=12, d_model=768, heads=12, vocab=50257, context=1024, default_seq_len=1024),
    "gpt-350m": TransformerShape(layers=24, d_model=1024, heads=16, vocab=50257, context=1024,
                                 default_seq_len=1024),
}


def check_seq_len(model: str, seq_len: int) -> str | None:
    """A one-line reason why ``model`` cannot take sequences of ``seq_len`` tokens, or None if it can."""
    shape = TRANSFORMER_PRESETS[model]
    if not 1 <= seq_len <= shape.context:
        return f"{model} takes --seq-len from 1 to its context length {shape.context} (got {seq_len})"
    return None

"""A decoder-only language model written with torch alone, GPT-2's layout, for the transformer presets.

Token embedding plus a learned position embedding, then pre-LayerNorm blocks (causal self-attention through
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, then a 4x GELU MLP, each added back to
the residual stream), a final LayerNorm and an LM head tied to the token embedding (GPT-2 ties them). No
dropout: a benchmark's step should not depend on a random mask. The shapes are the catalog's
(``ddptop.protocol.catalog.TRANSFORMER_PRESETS``); one example is one sequence of ``seq_len`` random tokens,
its target another random sequence (synthetic data: the arithmetic of a step does not depend on the values).

Also here: the independent FLOP count a step's counted FLOPs are checked against (``independent_flops``);
the attention FLOPs torch's flop counter leaves out on the CPU are added where the step is counted
(``bench_kernels.flops.attention_formulas``).

torch is imported inside the functions: importing this file costs nothing (the catalog lives apart, in the
standard library only).
"""

from __future__ import annotations

from typing import Any

from ddptop.protocol.catalog import TRANSFORMER_PRESETS, TransformerShape


def build_transformer(name: str) -> Any:
    """The preset ``name`` as an ``nn.Module`` taking ``(B, T)`` token ids and giving ``(B, T, vocab)`` logits."""
    return _classes()["GPT"](TRANSFORMER_PRESETS[name])


def synthetic_batch(torch: Any, shape: TransformerShape, batch: int, seq_len: int, device: Any) -> tuple[Any, Any]:
    """Random token ids and random next-token targets, ``(batch, seq_len)`` each."""
    inputs = torch.randint(0, shape.vocab, (batch, seq_len), device=device)
    targets = torch.randint(0, shape.vocab, (batch, seq_len), device=device)
    return inputs, targets


def lm_loss(logits: Any, targets: Any) -> Any:
    """Cross-entropy of every position's logits against its target token."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def attention_flops_per_token(shape: TransformerShape, seq_len: int) -> int:
    """The attention's own FLOPs per token of a training step (forward and backward), as torch's flop counter
    counts scaled_dot_product_attention on a GPU (torch/utils/flop_counter.py: sdpa_flop_count and
    sdpa_backward_flop_count): the forward's two matmuls (Q K^T and P V: 2 T d each per token and layer), the
    backward's five (the scores recomputed, as flash attention does, and four gradients): 14 T d per token
    and layer. The whole T x T square, as torch counts it: the causal mask's skipped half is not discounted."""
    return 14 * shape.layers * seq_len * shape.d_model


def independent_flops(shape: TransformerShape, batch: int, seq_len: int) -> int:
    """FLOPs of one forward and backward, counted from the shape alone: 6 x parameters x tokens (2 for each
    weight's multiply-add forward, 4 backward: the input's gradient and the weight's) plus the attention term
    (``attention_flops_per_token``). The position table is left out of the parameters: a lookup multiplies
    nothing (the token table is not: it is the LM head's weight too)."""
    tokens = batch * seq_len
    matmul_params = shape.params - shape.context * shape.d_model
    return 6 * matmul_params * tokens + attention_flops_per_token(shape, seq_len) * tokens


_CLASSES: dict[str, Any] = {}


def _classes() -> dict[str, Any]:
    """The ``nn.Module`` classes, defined on first use so that importing this file does not import torch."""
    if _CLASSES:
        return _CLASSES
    import torch
    from torch import nn
    from torch.nn import functional as F

    class CausalAttention(nn.Module):
        """scaled_dot_product_attention, causal, as a module of its own: a leaf whose output the CPU memory
        cap's count sees (``bench_kernels.memory_cap``), as the backward keeps it."""

        def forward(self, q: Any, k: Any, v: Any) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    class SelfAttention(nn.Module):
        def __init__(self, d_model: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.attend = CausalAttention()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x: Any) -> Any:
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, d)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self, d_model: int, heads: int) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = SelfAttention(d_model, heads)
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, shape: TransformerShape) -> None:
            super().__init__()
            if shape.d_model % shape.heads:
                raise ValueError(f"d_model {shape.d_model} does not divide into {shape.heads} heads")
            self.shape = shape
            self.tokens = nn.Embedding(shape.vocab, shape.d_model)
            # a parameter, not an Embedding: its rows are the same for every example, so a module output of
            # (T, d) would be scaled by the batch in the memory cap's count
            self.positions = nn.Parameter(torch.zeros(shape.context, shape.d_model))
            self.blocks = nn.ModuleList(Block(shape.d_model, shape.heads) for _ in range(shape.layers))
            self.ln_f = nn.LayerNorm(shape.d_model)
            self.head = nn.Linear(shape.d_model, shape.vocab, bias=False)
            self.head.weight = self.tokens.weight  # tied, as GPT-2
            nn.init.normal_(self.tokens.weight, std=0.02)
            nn.init.normal_(self.positions, std=0.01)

        def forward(self, idx: Any) -> Any:
            t = idx.shape[1]
            x = self.tokens(idx) + self.positions[:t]
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    _CLASSES.update(GPT=GPT, Block=Block, SelfAttention=SelfAttention, CausalAttention=CausalAttention)
    return _CLASSES

"""Hugging Face models from a config alone: ``hf:<model_type>[:key=value]...`` (``pip install -e ".[hf]"``).

Nothing is downloaded: ``AutoConfig.for_model(model_type, **overrides)`` gives the architecture's default
config with the overrides (the plan's ``hf_config`` beneath the spec's own), and ``AutoModelForCausalLM``
(a decoder: gpt2, llama, ...) or ``AutoModelForMaskedLM`` (an encoder: bert, roberta, ...) builds it with
random weights in fp32 (``--amp`` is autocast, as for every model; the config's own dtype is not used). A
batch is ``n`` sequences of random token ids of ``--seq-len`` (default: ``DEFAULT_SEQ_LEN``, or the model's
longest if shorter) with an all-ones attention mask, and the loss is the model's own with
``labels=input_ids`` (next-token for a decoder, every position for an encoder), ``use_cache=False``.

Also here: the independent FLOP count the counted FLOPs are checked against (``independent_flops``).
"""

from __future__ import annotations

from typing import Any

from bench_kernels.errors import WorkloadError, one_line
from ddptop.protocol.modelspec import BuildInputs, ModelSpec, SpecError, parse_hf
from ddptop.protocol.workload import Workload

DEFAULT_SEQ_LEN = 128
DECODER, ENCODER = "causal", "masked"


def hf_workload(model_spec: ModelSpec, inputs: BuildInputs) -> Workload:
    """The workload of an ``hf:`` spec; ``WorkloadError`` with one line for what cannot be built."""
    model, seq_len = model_spec.text, inputs.seq_len
    try:
        spec = parse_hf(model, inputs.hf_config)
    except SpecError as exc:
        raise WorkloadError(str(exc)) from None
    config, head = hf_config(model, spec.model_type, spec.overrides)
    import torch

    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if head == DECODER else AutoModelForMaskedLM
    try:
        try:
            net = auto.from_config(config, dtype=torch.float32)
        except TypeError:  # transformers before 4.56 names it torch_dtype
            net = auto.from_config(config, torch_dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - the overrides make a model transformers refuses
        raise WorkloadError(f"model {model}: transformers could not build it: {one_line(exc)}") from exc
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not isinstance(longest, int) or longest <= 0:  # XLNet's -1: no limit
        longest = None
    length = seq_len or (min(DEFAULT_SEQ_LEN, longest) if longest else DEFAULT_SEQ_LEN)
    if longest and length > longest:
        raise WorkloadError(f"model {model}: --seq-len {length} is past its max_position_embeddings {longest}")
    vocab = int(config.vocab_size)

    def make_batch(n: int, device: Any) -> dict[str, Any]:
        ids = torch.randint(0, vocab, (n, length), device=device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def loss(net: Any, batch: dict[str, Any]) -> Any:
        return net(**batch, labels=batch["input_ids"]).loss

    return Workload(net, make_batch, loss, tokens=lambda batch: int(batch["input_ids"].numel()))


def hf_config(model: str, model_type: str, overrides: dict[str, Any]) -> tuple[Any, str]:
    """The config of ``model_type`` with ``overrides`` and which head it gets (``DECODER`` or ``ENCODER``)."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        )
    except ImportError as exc:
        raise WorkloadError(f"model {model}: Hugging Face models need transformers: pip install -e \".[hf]\" "
                            f"({type(exc).__name__}: {exc})") from None
    try:
        config = AutoConfig.for_model(model_type, **overrides)
    except Exception as exc:  # noqa: BLE001 - an unknown model type, an override of the wrong type
        raise WorkloadError(f"model {model}: {one_line(exc)}") from None
    # a config keeps any keyword as an attribute: an override is known if the class's default config has it
    default = type(config)()
    known = set(default.to_dict()) | set(getattr(type(config), "attribute_map", {}))
    unknown = [k for k in overrides if k not in known]
    if unknown:
        raise WorkloadError(f"model {model}: {type(config).__name__} has no {', '.join(unknown)} "
                            "(a misspelt override would be ignored)")
    config.use_cache = False
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return config, ENCODER
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return config, DECODER
    raise WorkloadError(f"model {model}: transformers has neither a causal nor a masked language-model head for "
                        f"{model_type}")


def independent_flops(model: Any, batch: int, seq_len: int) -> int:
    """FLOPs of one forward and backward counted from the model's shapes alone: 6 x (the weights of its
    matrix multiplies) x tokens, plus the attention's own per token and layer. The matmul weights are those of
    every ``nn.Linear`` and HF ``Conv1D`` (GPT-2's projections), the output head included: an embedding lookup
    multiplies nothing, but a head tied to the token embedding multiplies by it. The attention term is 14 T d
    (forward Q K^T and P V, backward the scores recomputed and four gradients, as torch counts the fused
    ``scaled_dot_product_attention`` kernels), the whole T x T square causal or not; where the math path runs
    instead (a mask the fused kernel does not take) torch counts 12 T d, no recomputation, which this count
    exceeds by 2 L T d per token (under 1% at the tested sizes)."""
    import torch

    matmul = sum(module.weight.numel() for module in model.modules()
                 if (isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D")
                 and getattr(module, "weight", None) is not None)
    config = model.config
    tokens = batch * seq_len
    return 6 * matmul * tokens + 14 * int(config.num_hidden_layers) * seq_len * int(config.hidden_size) * tokens

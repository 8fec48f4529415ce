"""Check model specs before any launch: build each once and run one training step on a small batch.

    python -m bench_kernels.preflight --model SPEC [--model SPEC ...] [--device cpu|cuda]
                                      [--num-classes N] [--image-size PX] [--seq-len T] [--hf-config JSON]

Prints one JSON line per spec (``ddptop.protocol.workload.CheckAnswer``): what the plan needs to know of it
(``WorkloadFacts``: whether its batch holds images, its tokens per example, ...) or the one line that says
why it cannot run, naming the spec: a factory that cannot be imported, returns neither a module nor a
workload, makes a batch its model rejects, or a loss that is not a scalar tensor; a model with parameters
that get no gradient, which fails under DDP unless ``find_unused_parameters`` is set, is told so. The
step runs on the bare model in fp32 with ``CHECK_BATCH`` examples: what a wrapper or autocast adds is the
launch's to find. Exit status 0 once every spec is answered, 2 on bad arguments.

Before those, one JSON line as each phase starts (``CheckProgress``: importing torch, then for each spec
building its workload and running its step): ddptop bounds the check by the time without a line, so a
factory that never returns (a download without network) ends the check in one line naming it and the phase.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_kernels.errors import WorkloadError, one_line
from bench_kernels.batches import batch_tensors
from bench_kernels.sources import is_image, load_workload, tokens_per_example
from ddptop.protocol.devices import apply_rank_device
from ddptop.protocol.modelspec import kind_of
from ddptop.protocol.workload import CheckAnswer, CheckProgress, WorkloadFacts, describe

CHECK_BATCH = 2

# the phases, as the line that ends a stuck check says them after the model's name
BUILDING = "building its workload"
STEPPING = f"running one training step on {CHECK_BATCH} examples"


def check(model: str, device: Any, num_classes: int, image_size: int, seq_len: int | None = None,
          hf_config: dict[str, Any] | None = None,
          phase: Callable[[CheckProgress], None] = lambda _progress: None) -> WorkloadFacts:
    """Build ``model``'s workload and run one forward, loss and backward of a small batch on ``device``;
    ``WorkloadError`` with one line for what is wrong. ``phase`` is told as each phase starts."""
    import torch

    started = time.perf_counter()
    torch.manual_seed(0)
    phase(CheckProgress(BUILDING, model, setting_up=True))
    workload = load_workload(model, num_classes, image_size, seq_len, hf_config)
    net = workload.model.to(device)
    phase(CheckProgress(STEPPING, model))
    try:
        batch = workload.make_batch(CHECK_BATCH, device)
    except Exception as exc:  # noqa: BLE001 - the user's make_batch
        raise WorkloadError(f"model {model}: make_batch({CHECK_BATCH}, {device}) raised {one_line(exc)}") from exc
    tensors = batch_tensors(batch)
    if not tensors:
        raise WorkloadError(f"model {model}: make_batch({CHECK_BATCH}, {device}) returned a "
                            f"{type(batch).__name__} holding no tensor")
    net.train()
    try:
        loss = workload.loss(net, batch)
    except Exception as exc:  # noqa: BLE001 - the model rejecting its batch, or the loss failing
        raise WorkloadError(f"model {model}: the model rejects its batch of {CHECK_BATCH} ({_shapes(batch)}): "
                            f"{one_line(exc)}") from exc
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        got = (f"a tensor of shape {tuple(loss.shape)} and dtype {loss.dtype}" if isinstance(loss, torch.Tensor)
               else f"a {type(loss).__name__}")
        raise WorkloadError(f"model {model}: loss(net, batch) must return a scalar floating-point tensor, got {got}")
    if not loss.requires_grad:
        raise WorkloadError(f"model {model}: the loss does not depend on any trainable parameter (no gradient "
                            "flows back from it)")
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"model {model}: the backward of its loss raised {one_line(exc)}") from exc
    unused = [name for name, p in net.named_parameters() if p.requires_grad and p.grad is None]
    if unused and not workload.find_unused_parameters:
        raise WorkloadError(
            f"model {model}: {len(unused)} parameter(s) got no gradient in a step ({describe(unused)}): DDP fails on "
            "such a model unless told to look for them; give its workload find_unused_parameters=True")
    if workload.fsdp_units is not None:  # FSDP2's units, checked here rather than in the middle of a sweep
        from bench_kernels.strategy_wrappers import given_units

        try:
            given_units(net, workload.fsdp_units)
        except Exception as exc:  # noqa: BLE001
            raise WorkloadError(f"model {model}: fsdp_units(model): {one_line(exc)}") from exc
    try:
        tokens = tokens_per_example(workload, batch, CHECK_BATCH)
    except WorkloadError as exc:
        raise WorkloadError(f"model {model}: {exc}") from exc
    return WorkloadFacts(
        model=model,
        kind=kind_of(model).value,
        params=sum(p.numel() for p in net.parameters() if p.requires_grad),
        image_input=any(is_image(t) for t in tensors),
        tokens_per_example=tokens,
        flops_given=workload.flops is not None,
        find_unused_parameters=bool(workload.find_unused_parameters),
        seconds=time.perf_counter() - started,
    )


def _shapes(batch: Any) -> str:
    """The batch's tensors as shapes, for a line that says what the model was given."""
    shown = [f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in batch_tensors(batch)[:4]]
    return ", ".join(shown) or "no tensor"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--hf-config", default="{}", help="the plan's hf_config, a JSON object")
    args = parser.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    _say(CheckProgress("importing torch" + (" and starting CUDA" if on_gpu else ""), setting_up=True))
    import torch

    device = torch.device(args.device)
    if device.type == "cuda":  # local rank 0's GPU, as the ranks' environment names it
        device = torch.device("cuda", apply_rank_device(0))
        torch.cuda.set_device(device)
    hf_config = json.loads(args.hf_config)
    for model in args.model:
        try:
            facts = check(model, device, args.num_classes, args.image_size, args.seq_len, hf_config, _say)
            answer = CheckAnswer(model, facts=facts)
        except WorkloadError as exc:
            answer = CheckAnswer(model, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever else a user's code raises while being built
            answer = CheckAnswer(model, error=f"model {model}: {one_line(exc)}")
        print(answer.to_line(), flush=True)
    return 0


def _say(progress: CheckProgress) -> None:
    print(progress.to_line(), flush=True)


if __name__ == "__main__":
    sys.exit(main())

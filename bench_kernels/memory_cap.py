"""The per-rank memory cap (``--memory-cap-mb``): a smaller device, so out-of-memory is reachable and repeatable.

On GPU the caching allocator is told to refuse allocations past the cap: a smaller GPU, for real. On CPU
no allocator gives a reliable per-step peak, so the step's need is counted before it runs and a step past
the cap raises the OutOfMemoryError a GPU would: the configuration ends as "oom" either way. Apart from
the worker because the CPU count is arithmetic worth reading (and testing) on its own; ``CountedStepMemory``
is that count for one configuration's step, refused past the cap before any step or read after them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# batch_bytes: every tensor of a module's output, dicts (a ModelOutput) too
from bench_kernels.errors import one_line
from bench_kernels.sources import batch_bytes, to_channels_last
from bench_kernels.strategy_wrappers import counted_memory, reshard
from bench_kernels.training import Training
from ddptop.protocol.launchspec import RunConfig

MIB = 2**20
PROBE_EXAMPLES = 2  # the forward pass that counts activations runs on this many examples, then scales


def limit_gpu_memory(device: Any, cap_mb: float) -> None:
    """Make the caching allocator on ``device`` refuse allocations past ``cap_mb``."""
    import torch

    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_mb * MIB / total), device)


def step_memory_bytes(grad_bytes: int, input_bytes: int, activation_bytes: float) -> float:
    """What one SGD-with-momentum training step keeps alive: weights, gradients and momentum (3x the
    parameter bytes), the input batch, and every layer's output for the whole batch (what autograd keeps for
    the backward pass)."""
    return 3 * grad_bytes + input_bytes + activation_bytes


def layer_output_bytes(model: Any, run_forward: Any) -> tuple[int, Any]:
    """Bytes of every leaf module's output during ``run_forward()`` (a forward of ``model``, in eval mode and
    without gradients: nothing is kept), and what it returned."""
    import torch

    seen = 0

    def count(_module: Any, _inputs: Any, output: Any) -> None:
        nonlocal seen
        seen += batch_bytes(output)

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            result = run_forward()
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return seen, result


def activation_bytes(model: Any, inputs: Any, with_loss: bool = False) -> float:
    """Bytes of every leaf module's output for the whole batch ``inputs`` (one tensor), counted on a forward
    pass of its first examples and scaled, so a batch far past the cap is refused without being allocated.
    With ``with_loss``, also what the loss keeps for the backward pass: cross-entropy's log-probabilities, the
    size of the model's output (B x classes for a CNN, a few bytes; B x T x vocab for a language model, as
    much as its logits)."""
    probe = inputs[:PROBE_EXAMPLES]
    per_probe, output = layer_output_bytes(model, lambda: model(probe))
    if with_loss:
        per_probe += batch_bytes(output)
    return per_probe * inputs.shape[0] / probe.shape[0]


def workload_activation_bytes(model: Any, run_forward: Any, scale: float) -> float:
    """``activation_bytes`` for any workload: the leaf outputs of ``run_forward()`` (its loss on a batch of
    ``PROBE_EXAMPLES`` the workload made), times ``scale`` (the rank's batch over the probe's)."""
    return layer_output_bytes(model, run_forward)[0] * scale


def check_cpu_memory_cap(model: Any, inputs: Any, grad_bytes: int, cap_mb: float) -> None:
    """Raise torch's OutOfMemoryError if one training step of ``model`` on ``inputs`` needs more than
    ``cap_mb``."""
    import torch

    need = step_memory_bytes(grad_bytes, inputs.numel() * inputs.element_size(),
                             activation_bytes(model, inputs, with_loss=True))
    if need > cap_mb * MIB:
        error = getattr(torch, "OutOfMemoryError", MemoryError)
        raise error(
            f"out of memory under the memory cap: a step needs about {need / MIB:.0f} MiB, the cap is {cap_mb:g} MiB"
        )


class MemoryCapExceeded(MemoryError):
    """A step the CPU memory cap refused before it ran, on every rank of the group alike (the ranks agree on
    the fullest one's count first): no rank is inside a collective the others left, so the launch goes on with
    its next configuration instead of ending (a relaunch, 15-20 s on a 2-core machine, for every refusal)."""


def cap_refusal(need_bytes: float, cap_mb: float, ranks: int) -> MemoryCapExceeded | None:
    """The refusal of a step holding ``need_bytes`` on the fullest of ``ranks`` ranks (counted:
    ``bench_kernels.strategy_wrappers.counted_memory``, which shards ZeRO-1's and FSDP2's state), or None if it fits."""
    if need_bytes <= cap_mb * MIB:
        return None
    where = "this rank" if ranks == 1 else "the fullest rank"
    return MemoryCapExceeded(f"out of memory under the memory cap: a step needs about {need_bytes / MIB:.0f} MiB on {where} "
                     f"(counted), the cap is {cap_mb:g} MiB")


class NextForwardOutputs:
    """Counts every leaf module's output bytes during ``model``'s next forward (a step's, on its whole batch),
    then removes its hooks: the layer outputs of ``activation_bytes`` without a forward of its own, for the
    counted memory of a configuration run without a cap (an extra forward would be one more call of the
    model than its steps make). ``bytes`` is None until that forward has run."""

    def __init__(self, model: Any) -> None:
        self.bytes: float | None = None
        self._seen = 0

        def count(_module: Any, _inputs: Any, output: Any) -> None:
            self._seen += batch_bytes(output)

        def done(_module: Any, _inputs: Any, _output: Any) -> None:
            self.bytes = float(self._seen)
            for handle in self._handles:
                handle.remove()

        leaves = [m for m in model.modules() if not list(m.children())]
        self._handles = [m.register_forward_hook(count) for m in leaves] + [model.register_forward_hook(done)]


def activations_under_cap(cfg: RunConfig, training: Training, device: Any) -> float:
    """The layer outputs of a step on this rank's batch, from a forward of a small batch the workload makes
    (``workload_activation_bytes``). A workload whose forward cannot be followed so cannot run under the CPU
    memory cap: the configuration fails saying so, rather than run past an uncounted cap."""
    probe = training.workload.make_batch(PROBE_EXAMPLES, device)
    if cfg.channels_last:
        probe = to_channels_last(probe)
    try:
        return workload_activation_bytes(training.model, lambda: training.loss(training.model, probe),
                                         training.batch_size / PROBE_EXAMPLES)
    except Exception as exc:  # noqa: BLE001 - said as what it is
        raise RuntimeError(f"--memory-cap-mb cannot count this workload's step on the CPU (a forward of "
                           f"{PROBE_EXAMPLES} examples failed: {one_line(exc)}); run it without "
                           "the cap") from exc


class CountedStepMemory:
    """What one step of a configuration holds on a CPU rank, counted by kind
    (``bench_kernels.strategy_wrappers.counted_memory``): the CPU has no allocator peak.

    Under a cap, before any step (``refuse_past_cap``): the layer outputs from a forward of PROBE_EXAMPLES
    examples, scaled (a batch far past the cap is never allocated), and the step refused past the cap (for DDP
    the number the cap has always counted: 3x the parameters, the inputs and the outputs). Without one, the
    outputs are counted during the first step, with no forward of their own (``NextForwardOutputs``)."""

    def __init__(self, training: Training, cap_mb: float | None) -> None:
        self.training = training
        self.cap_mb = cap_mb
        self.activations: float | None = None
        self._outputs = None if cap_mb else NextForwardOutputs(training.model)

    def refuse_past_cap(self, cfg: RunConfig, device: Any, on_fullest_rank: Callable[[float], float],
                        ranks: int) -> None:
        """Raise ``MemoryCapExceeded`` before any step where the step would hold more than the cap on the fullest
        of the ``ranks`` ranks (``on_fullest_rank``: the largest of every rank's count, so all refuse or none);
        nothing without a cap."""
        if not self.cap_mb:
            return
        training = self.training
        self.activations = activations_under_cap(cfg, training, device)
        reshard(training.model)  # FSDP2 without reshard_after_forward: gathered by that forward alone
        need = sum(counted_memory(training.model, training.optimizer, training.input_bytes, self.activations).values())
        refusal = cap_refusal(on_fullest_rank(need), self.cap_mb, ranks)
        if refusal is not None:
            raise refusal

    def after_steps(self) -> dict[str, int] | None:
        """What one step holds by kind, read after the steps (gradients and optimizer state as held); None where
        no layer output was counted."""
        if self._outputs is not None:
            self.activations = self._outputs.bytes
        if self.activations is None:
            return None
        training = self.training
        return counted_memory(training.model, training.optimizer, training.input_bytes, self.activations)

"""The gradient norms of a user's script, on either side of each allreduce, for the gradient noise scale.

Where the script makes a ``DistributedDataParallel`` model in a group of two ranks or more (``probe_sync``), the
probe registers a communication hook on it at once that takes each bucket's norm before and after
(``bench_kernels.gradient_norms``) around whatever hook the script registers later, or DDP's own averaging
allreduce (torch's ``default_hooks.allreduce_hook``, the Python form of what DDP runs without a hook). DDP takes
one hook per model, before its first backward, so the model's ``register_comm_hook`` and
``_register_builtin_comm_hook`` are replaced on that instance: the script's hook is checked as DDP checks it,
named in DDP's logging data as DDP names it, and run inside the probe's; a second registration is refused as
DDP refuses it. A built-in hook is run as its Python equivalent (``BUILTIN``).

A step gives a pair of squared norms only where its one model synchronised exactly once: with no_sync()
around the micro-batches before the last, the bucket then holds the local gradient over every example the
rank drew since the step before (its examples, counted by the probe). A step that synchronised after each
micro-batch gives none: a bucket then holds the average of the earlier micro-batches plus this one's own, a
gradient of no single batch. Under fp16 or bf16 compression the averaged side is the decompressed average;
under a hook whose result is not the ranks' average (PowerSGD's low-rank approximation, post-local SGD),
nothing is measured (``ddptop.protocol.comm_hooks``). Once the measured steps are over (``stop``), no more
norms are taken.

It fails open: an exception in the probe's part turns the measurement off (``failed``), the allreduce and the
script's hook run on unchanged.
"""

from __future__ import annotations

from typing import Any

from bench_kernels.errors import one_line
from bench_kernels.gradient_norms import GradientNorms
from ddptop.protocol.comm_hooks import AVERAGING_HOOKS

BUILTIN = {"ALLREDUCE": "allreduce_hook", "FP16_COMPRESS": "fp16_compress_hook"}  # torch's default_hooks


class ScriptNoise:
    """The norm taps of every DDP model the script made, and the pair each measured step gives."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.taps: list[GradientNorms] = []
        self.failed: str | None = None  # why it stopped measuring, for config_end's notes
        self.stopped = False  # the measured steps are over (or the probe turned itself off): no more norms

    def stop(self) -> None:
        """Take no more norms: nothing reads them once the measured steps are over (the hooks stay, as DDP
        keeps a hook; the script's own runs on unchanged)."""
        self.stopped = True

    def attach(self, model: Any) -> None:
        """Put the probe's hook on a new DDP model (its group of two ranks or more), before any backward."""
        if self.failed is not None:
            return
        try:
            # one rank has nothing to compare its gradient with; DDP's Python reducer (compiled autograd) calls
            # its hooks with (grad, param), not a bucket
            if model.process_group.size() < 2 or getattr(model, "_use_python_reducer", False):
                return
            self._attach(model)
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.failed = f"gradient norms not taken: {one_line(exc)}"

    def _attach(self, model: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        torch, norms = self.torch, GradientNorms(self.torch)
        chosen: list[tuple[Any, Any]] = []  # the script's (hook, state), once it registers one
        group = model.process_group
        noise = self

        def probe_hook(_state, bucket):  # no annotations: DDP checks any it finds against GradBucket
            buffer = bucket.buffer()
            if noise.failed is None and not noise.stopped:
                try:
                    norms.before(bucket.index(), buffer)
                except Exception as exc:  # noqa: BLE001 - the probe fails open
                    noise.failed = f"gradient norms not taken: {one_line(exc)}"
            hook, state = chosen[0] if chosen else (default_hooks.allreduce_hook, group)
            future = hook(state, bucket)
            if noise.failed is not None or noise.stopped:
                return future
            cuda = buffer.device.type == "cuda"

            def arrived(fut: Any) -> Any:
                value = fut.value()
                if noise.failed is None and not noise.stopped:
                    try:  # gloo completes a CUDA future on its own thread: on this bucket's device
                        if cuda:
                            with torch.cuda.device(buffer.device):
                                norms.after(value)
                        else:
                            norms.after(value)
                    except Exception as exc:  # noqa: BLE001 - the probe fails open
                        noise.failed = f"gradient norms not taken: {one_line(exc)}"
                return value

            return future.then(arrived)

        def register_comm_hook(state: Any, hook: Any) -> None:
            if chosen:
                raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
            model._check_comm_hook(hook)
            model.logger._set_comm_hook_name(hook.__qualname__)
            model._comm_hooks.append((hook, state))
            chosen.append((hook, state))
            if hook.__qualname__ not in AVERAGING_HOOKS:  # its result is no batch's average gradient
                noise.failed = (f"gradient noise scale not measured: the script's comm hook {hook.__qualname__} does "
                                "not hand back the average of the ranks' gradients")

        def register_builtin_comm_hook(comm_hook_type: Any) -> None:
            if chosen:
                raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
            name = BUILTIN.get(getattr(comm_hook_type, "name", str(comm_hook_type)))
            if name is None:
                raise RuntimeError(f"ddptop's probe cannot run the built-in comm hook {comm_hook_type}")
            model.logger._set_comm_hook_name(str(comm_hook_type))
            chosen.append((getattr(default_hooks, name), group))

        model.register_comm_hook(None, probe_hook)
        model.logger._set_comm_hook_name("")  # DDP's logging names the script's hook, not the probe's
        model.register_comm_hook = register_comm_hook
        model._register_builtin_comm_hook = register_builtin_comm_hook
        self.taps.append(norms)

    def step_pair(self) -> tuple[float, float] | None:
        """The measured step's squared norms (local, averaged), where one model synchronised exactly once in it;
        read after the step's own synchronize. Every tap is emptied for the next step."""
        if self.failed is not None or not self.taps:
            return None
        try:
            taken = [found for found in (tap.take() for tap in self.taps) if found]
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.failed = f"gradient norms not taken: {one_line(exc)}"
            return None
        return taken[0][0] if len(taken) == 1 and len(taken[0]) == 1 else None


__all__ = ["BUILTIN", "ScriptNoise"]

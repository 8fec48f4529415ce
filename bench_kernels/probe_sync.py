"""How a user's script synchronises its gradients, as the probe sees it (``config_end.script``'s ``wrappers`` and
``collectives``).

Every model the script wraps for data parallelism is recorded where it is made: ``DistributedDataParallel``
(its ``__init__`` replaced on the class, so every import of it and every subclass that calls it is seen),
``FullyShardedDataParallel`` and ``fully_shard`` (``torch.distributed.fsdp``), ``ZeroRedundancyOptimizer``
(``torch.distributed.optim``); those two modules cost most of a second to import, so they are patched when the
script imports them (``_AfterImport``), not before. Each wrapper keeps its kind, the constructor's call site in
the script's code (the first frame outside torch and the probe), the keyword arguments that shape DDP's
communication as the script gave them, and whether it wraps a model another wrapper already holds.

For DDP, each forward with gradients enabled is one micro-batch, and one whose ``require_backward_grad_sync``
is true synchronises its gradients in the backward that follows (``DistributedDataParallel._pre_forward`` and
``no_sync()`` in torch/nn/parallel/distributed.py): ``DistributedDataParallel.forward`` is replaced on the class
by one that counts them (an attribute read and an integer add), and every measured step keeps how many of each
it ran. FSDP's are counted alike, on the root alone (inner instances and sharded blocks run inside it): a
``FullyShardedDataParallel`` forward synchronises unless inside its ``no_sync()`` (``_sync_gradients``); a module
``fully_shard`` sharded gets a forward pre-hook, after FSDP's own, and reduces its gradients unless
``set_requires_gradient_sync(False)`` turned that off (its parameter groups' ``reduce_grads``; FSDP reads both
at the backward, the probe at the forward: a setting changed between the two is counted as it was at the
forward). One line that shards several modules (a loop over the blocks, FSDP's auto-wrapping) is one record,
its modules counted; where it makes several roots (a generator and a discriminator), a step counts its
busiest root's micro-batches, not their sum. DDP's own timers (``_get_ddp_logging_data``: forward and backward compute, backward communication and
its overlap with compute) are read over the measured steps as ddptop's kernel reads them
(``comm_probe.ddp_logging_mark``), with every step recorded (``_set_ddp_runtime_logging_sample_rate(1)``), up
to the configuration's end or the model's collection, whichever comes first (its logger holds the gradient
buckets: a script that makes its model again and again keeps none of them alive). A comm hook the script
registered is named from the same data. Calls of ``torch.distributed``'s collectives by
the script itself during the measured steps are counted, so a script that averages its gradients by hand is
not taken for one whose ranks train alone.

It fails open: an exception in the probe's part of any of these hooks turns that measurement off, the script's
call goes on unchanged, and ``config_end``'s note says what was not measured from which step.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import inspect
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from bench_kernels.ddp_logging import ddp_logging_mark, ddp_logging_times
from bench_kernels.errors import one_line
from bench_kernels.probe_noise import ScriptNoise

DDP = "DistributedDataParallel"
FSDP = "FullyShardedDataParallel"
FULLY_SHARD = "fully_shard"
ZERO = "ZeroRedundancyOptimizer"
COUNTED = (DDP, FSDP, FULLY_SHARD)  # kinds whose micro-batches and synchronisations each step are counted
# DDP's keyword arguments that shape its gradient synchronisation, kept as the script gave them
DDP_ARGS = ("bucket_cap_mb", "find_unused_parameters", "gradient_as_bucket_view", "static_graph", "broadcast_buffers")
MAX_WRAPPERS = 8  # wrappers recorded; a script that makes more (one a step?) is said to, the rest not kept
MAX_REPR = 40  # characters of an argument's repr
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "reduce", "broadcast", "all_to_all", "all_to_all_single")
_HERE = os.path.dirname(os.path.abspath(__file__))


class _LoggerView:
    """What ``comm_probe``'s readers ask of a DDP model, without the model: its ``dist.Logger``, so that DDP's
    timers can be read as the model is collected (the script's frames unwound by ddptop's stop, say)."""

    def __init__(self, logger: Any, every_step: bool) -> None:
        self.logger = logger
        if every_step:  # comm_probe reads a window of steps only where each one is recorded
            self._set_ddp_runtime_logging_sample_rate = True

    def _get_ddp_logging_data(self) -> dict[str, Any]:
        data = self.logger._get_ddp_logging_data()
        return {**data.strs_map, **data.ints_map}


class Wrapper:
    """One model the script wrapped for data parallelism, and what its forwards did since the last step."""

    __slots__ = ("kind", "site", "via", "modules", "args", "rewrapped", "inner", "view", "mark", "counts", "steps",
                 "logging", "comm_hook", "alive", "static_possible")

    def __init__(self, kind: str, site: tuple[str | None, str | None], args: dict[str, str], rewrapped: bool,
                 inner: int | None) -> None:
        self.site, self.via = site  # the user's line, and the library's that made it (call_site)
        self.kind, self.args, self.rewrapped, self.inner = kind, args, rewrapped, inner
        self.modules = 1  # FSDP, fully_shard: the modules sharded by this line with these arguments
        self.view: _LoggerView | None = None
        self.mark: dict[str, Any] | None = None
        # per model (a root of FSDP's: one line may make several, a generator's and a discriminator's) since the
        # last step's end: [micro-batches (forwards with gradients enabled), of which synchronise their gradients]
        self.counts: dict[int, list[int]] = {}
        self.steps: dict[tuple[int, int], int] = {}  # (micro-batches, syncs) -> measured steps that ran them
        self.logging: dict[str, Any] | None = None
        self.comm_hook: str | None = None
        self.alive = True  # its model is not gone
        self.static_possible: bool | None = None  # DDP's can_set_static_graph at the end (ddptop tune's choice)

    def micro_batch(self, model: Any, syncs: bool) -> None:
        counted = self.counts.setdefault(id(model), [0, 0])
        counted[0] += 1
        counted[1] += bool(syncs)

    def step_counts(self) -> tuple[int, int]:
        """The step's (micro-batches, syncs) of its busiest model (several roots' forwards are not added up:
        two models a step, one micro-batch each, are not two micro-batches); the counts start again."""
        busiest = max(self.counts.values(), default=[0, 0])
        self.counts = {}
        return busiest[0], busiest[1]

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"kind": self.kind, "site": self.site, "via": self.via, "args": self.args,
                                 "rewrapped": self.rewrapped}
        if self.modules > 1:
            found["modules"] = self.modules
        if self.kind in COUNTED:
            found["sync_steps"] = [[micro, syncs, count] for (micro, syncs), count in sorted(self.steps.items())]
        if self.kind == DDP:
            found["ddp_logging"] = self.logging
            found["comm_hook"] = self.comm_hook
            if self.static_possible is not None:
                found["can_set_static_graph"] = self.static_possible
        return found


# installed code: the packages' folders before the standard library's, which holds them in a virtual environment
_LIBRARIES = tuple(sorted({os.path.dirname(os.__file__), *(p for p in sys.path if p.endswith(("site-packages",
                                                                                                "dist-packages")))},
                          key=len, reverse=True))


def _in_library(path: str) -> str | None:
    """The path of an installed library's file from its package folder on; None for any other file."""
    folder = next((f for f in _LIBRARIES if path.startswith(f + os.sep)), None)
    return os.path.relpath(path, folder) if folder is not None else None


def _shown(path: str) -> str:
    """A path of the user's as they read it: relative to where the rank started (where ddptop was started) when
    under it, else as it is."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        relative = path
    return path if relative.startswith(os.pardir) else relative


def call_site(skip: tuple[str, ...]) -> tuple[str | None, str | None]:
    """Where the wrapper was made: the line of the user's own code that led to it (the first frame, from the
    caller outward, outside torch, the probe, the import machinery and the installed libraries), and the
    library's line that made it where a framework did (the Trainer's accelerate, Lightning), else None."""
    frame = sys._getframe(2)
    made: str | None = None
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith(skip) or path.startswith("<") or os.path.basename(path) == "runpy.py"):
            library = _in_library(path)
            if library is None:
                return f"{_shown(path)}:{frame.f_lineno}", made
            made = made or f"{library}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return made, None


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[:MAX_REPR - 1] + "…"


class GradSync:
    """The hooks and what they saw. ``step_number`` says which step is running (for the notes), ``notes`` is
    the probe's list of what it could not measure."""

    def __init__(self, torch: Any, notes: list[str], step_number: Callable[[], int],
                 ddp_arguments: dict[str, Any] | None = None, no_sync_every: int = 0) -> None:
        self.torch = torch
        self.ddp_arguments = dict(ddp_arguments or {})  # ddptop tune's try: set on every DDP call the script makes
        # ddptop tune's no_sync try: a DDP model synchronises on every k-th micro-batch of a step alone
        self.no_sync_every = no_sync_every
        self.no_sync_set: set[int] = set()  # the DDP models (ids) whose forwards it was set on
        self.notes = notes
        self.step_number = step_number
        self.wrappers: list[Wrapper] = []
        self.incomplete = False  # a wrapper may have been made unrecorded (more than MAX_WRAPPERS, a hook failed)
        self.by_id: dict[int, Wrapper] = {}  # id(DDP model) -> its wrapper (the model's weakref drops it)
        self.counting = True  # the wrapped models' forwards (off once counting one failed)
        self.tried = 0  # DDP calls given ddptop tune's try
        self.measuring = False
        self.collectives = 0  # the script's own collective calls during the measured steps
        self.own = 0  # > 0 while the probe itself calls a collective (the ranks' agreement)
        self.ended = False
        self._skip = (os.path.dirname(os.path.abspath(torch.__file__)), _HERE)
        self._compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
        self._undo: list[Callable[[], None]] = []
        self._failed: set[str] = set()
        self.noise = ScriptNoise(torch)  # each DDP model's gradient norms around its allreduce (probe_noise)

    # -- installing -----------------------------------------------------------------------------------------
    def install(self) -> None:
        """Install every hook that can be (each fails on its own); ``uninstall`` removes them, those installed
        since (on the script's import of FSDP or ZeRO) too."""
        for what, install in (("DistributedDataParallel", self._hook_ddp), ("collective calls", self._count_collectives),
                              ("FSDP and ZeroRedundancyOptimizer", self._hook_on_import)):
            try:
                install()
            except Exception as exc:  # noqa: BLE001 - the probe fails open
                self.incomplete = True
                self.failed(f"{what} not watched", exc)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _replace(self, owner: Any, name: str, new: Any) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, new)
        self._undo.append(functools.partial(setattr, owner, name, original))

    def _hook_ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        init, forward = DistributedDataParallel.__init__, DistributedDataParallel.forward
        signature = inspect.signature(init)
        sync = self

        @functools.wraps(init)
        def watched_init(model: Any, *args: Any, **kwargs: Any) -> None:
            given, called = (args, kwargs), (args, kwargs)
            if sync.ddp_arguments:  # the try's keywords in place of the script's: the call fails where DDP refuses
                called = sync.tried_call(signature, model, args, kwargs)
            init(model, *called[0], **called[1])
            try:
                sync.ddp_made(model, signature, *given)  # its arguments as the script gave them
            except Exception as exc:  # noqa: BLE001 - the probe fails open
                sync.incomplete = True
                sync.failed("a DistributedDataParallel model not recorded", exc)

        self._replace(DistributedDataParallel, "__init__", watched_init)
        self._replace(DistributedDataParallel, "forward", self._counted(forward, "count_forward"))

    def tried_call(self, signature: inspect.Signature, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A DDP call's arguments with ddptop tune's try set by name over the script's (given by position or
        keyword); a keyword this torch's DDP does not take is DDP's TypeError, as the script's own would be."""
        missing = [name for name in self.ddp_arguments if name not in signature.parameters]
        if missing:
            raise TypeError(f"DistributedDataParallel() got an unexpected keyword argument {missing[0]!r} "
                            "(ddptop tune's try)")
        bound = signature.bind(model, *args, **kwargs)
        bound.arguments.update(self.ddp_arguments)
        self.tried += 1
        return bound.args[1:], bound.kwargs

    def _counted(self, forward: Callable[..., Any], count: str) -> Callable[..., Any]:
        """``forward`` that first has the method named ``count`` count its call (looked up at each call)."""

        @functools.wraps(forward)
        def counted_forward(model: Any, *args: Any, **kwargs: Any) -> Any:
            self._count_call(count, model)
            return forward(model, *args, **kwargs)

        return counted_forward

    def _count_call(self, count: str, model: Any, *_: Any) -> None:
        """One forward of a wrapped model, counted by the method named ``count`` (not while torch.compile traces
        it: a compiled forward is not counted, and the verdicts say so)."""
        if self.counting and not self._compiling():
            try:
                getattr(self, count)(model)
            except Exception as exc:  # noqa: BLE001 - the probe fails open
                self.counting_failed(exc)

    def _count_collectives(self) -> None:
        dist = self.torch.distributed
        if not dist.is_available():
            return
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None:
                continue

            def counted(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                if self.measuring and not self.own:
                    self.collectives += 1
                return _original(*args, **kwargs)

            self._replace(dist, name, functools.wraps(original)(counted))

    def _hook_on_import(self) -> None:
        patches = {"torch.distributed.fsdp": self._hook_fsdp, "torch.distributed.optim": self._hook_zero}
        waiting = {}
        for name, patch in patches.items():
            if name in sys.modules:
                patch(sys.modules[name])
            else:
                waiting[name] = patch
        if waiting:
            finder = _AfterImport(waiting, self)
            sys.meta_path.insert(0, finder)
            self._undo.append(functools.partial(_remove, sys.meta_path, finder))

    def _hook_fsdp(self, module: Any) -> None:
        fsdp = module.FullyShardedDataParallel
        self._watch_constructor(fsdp, FSDP, counted=True)
        self._replace(fsdp, "forward", self._counted(fsdp.forward, "count_fsdp_forward"))
        shard = getattr(module, "fully_shard", None)
        if shard is not None:
            @functools.wraps(shard)
            def watched_shard(*args: Any, **kwargs: Any) -> Any:
                found = shard(*args, **kwargs)
                wrapper = self.made(FULLY_SHARD, {}, None)
                if wrapper is not None:
                    for sharded in found if isinstance(found, (list, tuple)) else [found]:
                        self._watch_shard(sharded, wrapper)
                return found

            self._replace(module, "fully_shard", watched_shard)
            inner = sys.modules.get("torch.distributed.fsdp._fully_shard")
            if inner is not None and getattr(inner, "fully_shard", None) is shard:
                self._replace(inner, "fully_shard", watched_shard)

    def _hook_zero(self, module: Any) -> None:
        self._watch_constructor(module.ZeroRedundancyOptimizer, ZERO)

    def _watch_constructor(self, cls: type, kind: str, counted: bool = False) -> None:
        """Record each object ``cls`` makes; ``counted``: and find its wrapper from the object (its forwards)."""
        init = cls.__dict__["__init__"]

        @functools.wraps(init)
        def watched_init(obj: Any, *args: Any, **kwargs: Any) -> None:
            init(obj, *args, **kwargs)
            wrapper = self.made(kind, {}, None)
            if counted and wrapper is not None:
                try:
                    self._register(obj, wrapper)
                except Exception as exc:  # noqa: BLE001 - the probe fails open
                    self.counting_failed(exc)

        self._replace(cls, "__init__", watched_init)

    def _watch_shard(self, module: Any, wrapper: Wrapper) -> None:
        """A module fully_shard sharded: its forwards counted by a forward pre-hook appended after FSDP's own
        (which FSDP prepends: the root is known by then, and its gradient synchronisation set)."""
        try:
            self._register(module, wrapper)
            handle = module.register_forward_pre_hook(functools.partial(self._count_call, "count_shard_forward"))
            self._undo.append(handle.remove)
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.counting_failed(exc)

    def _register(self, model: Any, wrapper: Wrapper) -> None:
        """Find ``wrapper`` from its model's forwards, until the model is collected."""
        key = id(model)
        weakref.finalize(model, self._gone, key)  # first: a model that cannot be referenced weakly is not kept
        self.by_id[key] = wrapper

    # -- what the hooks record ------------------------------------------------------------------------------
    def made(self, kind: str, args: dict[str, str], inner: int | None) -> Wrapper | None:
        """A wrapper was made (never fails: what cannot be recorded is said in the notes)."""
        try:
            site = call_site(self._skip)
            if kind in (FSDP, FULLY_SHARD):  # a loop sharding each block, FSDP's auto-wrapped inner instances: one
                # record of that line, its modules counted
                same = next((w for w in self.wrappers if w.kind == kind and (w.site, w.via) == site and w.args == args),
                            None)
                if same is not None:
                    same.modules += 1
                    same.alive = True  # a model made again by the line whose earlier ones were collected
                    return same
            if len(self.wrappers) >= MAX_WRAPPERS:
                self.incomplete = True
                return None
            rewrapped = inner is not None and any(w.inner == inner for w in self.wrappers)
            wrapper = Wrapper(kind, site, args, rewrapped, inner)
            self.wrappers.append(wrapper)
            return wrapper
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.incomplete = True
            self.failed(f"a {kind} not recorded", exc)
            return None

    def ddp_made(self, model: Any, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        given = signature.bind_partial(model, *args, **kwargs).arguments
        module = given.get("module")
        wrapper = self.made(DDP, {name: short_repr(given[name]) for name in DDP_ARGS if name in given},
                            id(module) if module is not None else None)
        if wrapper is None:
            return
        if isinstance(module, type(model)):
            wrapper.rewrapped = True  # a DDP model inside another
        self._register(model, wrapper)
        self.noise.attach(model)
        every_step = False
        setter = getattr(model, "_set_ddp_runtime_logging_sample_rate", None)
        if setter is not None:  # DDP's timers on every step, not the first 10 and then 1 in 100
            setter(1)
            every_step = True
        logger = getattr(model, "logger", None)
        if logger is not None:
            wrapper.view = _LoggerView(logger, every_step)
        if self.measuring and wrapper.view is not None:  # made during the measured steps: its window starts here
            wrapper.mark = ddp_logging_mark(wrapper.view)

    def count_forward(self, model: Any) -> None:
        """A DDP forward: a micro-batch with gradients, synchronising them unless inside no_sync()."""
        wrapper = self.by_id.get(id(model))
        if wrapper is not None and self.torch.is_grad_enabled():
            if self.no_sync_every:  # as no_sync() around the first k-1 micro-batches would: DDP reads it at forward
                done = wrapper.counts.get(id(model), (0, 0))[0]
                model.require_backward_grad_sync = (done + 1) % self.no_sync_every == 0
                self.no_sync_set.add(id(model))
            wrapper.micro_batch(model, model.require_backward_grad_sync)

    def count_fsdp_forward(self, model: Any) -> None:
        """A FullyShardedDataParallel forward: the root's alone is a micro-batch (its inner instances run inside
        it; ``_is_root`` is None until the first forward, the root's, decides), synchronising unless inside its
        no_sync() (``_sync_gradients``, torch/distributed/fsdp/fully_sharded_data_parallel.py)."""
        wrapper = self.by_id.get(id(model))
        if wrapper is not None and self.torch.is_grad_enabled() and getattr(model, "_is_root", None) is not False:
            wrapper.micro_batch(model, bool(model._sync_gradients))

    def count_shard_forward(self, module: Any) -> None:
        """A forward of a module fully_shard sharded: the root's alone is a micro-batch (an inner module runs
        inside it, or again in the backward under activation checkpointing), reducing its gradients unless
        ``set_requires_gradient_sync(False)`` turned that off."""
        wrapper = self.by_id.get(id(module))
        if wrapper is None or not self.torch.is_grad_enabled():
            return
        state = module._get_fsdp_state()
        if state._is_root:
            wrapper.micro_batch(module, _reduces_gradients(state))

    def _gone(self, key: int) -> None:
        """A DDP model was collected: its timers read now and its logger let go (it holds the gradient buckets:
        a script that makes a model again and again must not keep them all)."""
        wrapper = self.by_id.pop(key, None)
        if wrapper is not None and not any(w is wrapper for w in self.by_id.values()):  # its last model
            wrapper.alive = False
            self._read_end(wrapper)

    def step_ended(self, measured: bool) -> None:
        """A training step ended (``measured``: one of the measured steps): its micro-batches and syncs kept."""
        try:
            for wrapper in self.wrappers:
                if wrapper.kind not in COUNTED or not wrapper.alive:
                    continue
                key = wrapper.step_counts()
                if measured and self.counting:
                    wrapper.steps[key] = wrapper.steps.get(key, 0) + 1
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.counting_failed(exc)

    def measuring_started(self) -> None:
        """The warm-up is over: DDP's timers are read from here (each model's mark), and collectives counted."""
        self.measuring = True
        for wrapper in self.wrappers:
            if wrapper.view is not None:
                try:
                    wrapper.mark = ddp_logging_mark(wrapper.view)
                except Exception as exc:  # noqa: BLE001 - the probe fails open
                    wrapper.view = None
                    self.failed("DDP's timers not read", exc)

    def finish(self) -> None:
        """The script ended: DDP's timers over the measured steps and its comm hook read, once; the loggers let go."""
        if self.ended:
            return
        self.ended = True
        for wrapper in self.wrappers:
            self._read_end(wrapper)
        self.measuring = False
        self.noise.stop()
        if self.noise.failed is not None:
            self.notes.append(self.noise.failed)

    def _read_end(self, wrapper: Wrapper) -> None:
        """DDP's timers over the measured steps (from its mark to now) and its comm hook; its logger let go."""
        view, wrapper.view = wrapper.view, None
        if view is None:
            return
        try:
            if wrapper.mark is not None and self.measuring:
                wrapper.logging = ddp_logging_times(view, since=wrapper.mark)
            data = view._get_ddp_logging_data()
            wrapper.comm_hook = data.get("comm_hook") or None
            static = data.get("can_set_static_graph")
            wrapper.static_possible = bool(static) if isinstance(static, int) else None
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.failed("DDP's timers not read", exc)

    @contextlib.contextmanager
    def own_collective(self) -> Iterator[None]:
        """The probe's own collective (the ranks' agreement) runs inside: not counted as the script's."""
        self.own += 1
        try:
            yield
        finally:
            self.own -= 1

    def counting_failed(self, exc: BaseException) -> None:
        """A hook that counts the wrapped models' forwards failed: no more are counted, and the note says so."""
        self.counting = False
        self.failed("gradient synchronisations and micro-batches not counted", exc)

    def failed(self, what: str, exc: BaseException) -> None:
        """Say once what was not measured, from which step, and why."""
        if what in self._failed:
            return
        self._failed.add(what)
        self.notes.append(f"{what} from step {self.step_number()} on: {one_line(exc)}")

    def seen(self) -> dict[str, Any]:
        """``config_end.script``'s ``wrappers`` and ``collectives``, and ``wrappers_incomplete`` where a wrapper
        may have been made unrecorded (beyond MAX_WRAPPERS, or a hook that failed)."""
        self.finish()
        found: dict[str, Any] = {"wrappers": [w.to_json() for w in self.wrappers], "collectives": self.collectives}
        if self.incomplete:
            found["wrappers_incomplete"] = True
        if self.ddp_arguments or self.no_sync_every:  # ddptop tune's try: on how many DDP models it was set (0: none)
            parts = ([self.tried] if self.ddp_arguments else []) + ([len(self.no_sync_set)] if self.no_sync_every else [])
            found["tried_on"] = min(parts)  # a try of both: applied where both parts were
        return found


def _reduces_gradients(state: Any) -> bool:
    """Whether fully_shard's root ``state`` reduces gradients in the coming backward: any parameter group of the
    states it runs (``reduce_grads``, which ``set_requires_gradient_sync`` sets; torch before 2.6 kept one group
    a state, ``_fsdp_param_group``)."""
    states = getattr(getattr(state, "_state_ctx", None), "all_states", None) or [state]
    for one in states:
        groups = getattr(one, "_fsdp_param_groups", None)
        if groups is None:
            group = getattr(one, "_fsdp_param_group", None)
            groups = [group] if group is not None else []
        if any(group.reduce_grads for group in groups):
            return True
    return False


def _remove(items: list[Any], item: Any) -> None:
    if item in items:
        items.remove(item)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module once the script's import of it has run its code (torch.distributed.fsdp and
    torch.distributed.optim cost most of a second to import: a script that uses neither never pays for them)."""

    def __init__(self, patches: dict[str, Callable[[Any], None]], sync: GradSync) -> None:
        self.patches, self.sync = patches, sync

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch, self.sync)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[Any], None], sync: GradSync) -> None:
        self.loader, self.patch, self.sync = loader, patch, sync

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            self.patch(module)
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.sync.incomplete = True
            self.sync.failed(f"{module.__name__}'s wrappers not watched", exc)

    def __getattr__(self, name: str) -> Any:  # what else importlib asks of the loader (get_resource_reader, ...)
        return getattr(self.loader, name)

"""What every rank program shares, whatever it runs: ``bench_kernels.ddp`` (ddptop's own measured steps) and
``bench_kernels.script_probe`` (a user's training script).

A rank reads its launch spec, dies with its torchrun agent, is bound to its CPUs before torch starts a thread,
opens its events file, says ``hello``, turns SIGTERM and SIGINT into an exception that leaves through the
flush path, reports a failure as an ``error`` event, and, once every event is written, exits without the
interpreter's teardown. torch is passed in or imported inside the functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import socket
import sys
import traceback
from importlib import metadata
from typing import Any

from ddptop.protocol.affinity import NUMA_BINDING_ENV, UNBOUND_ENV, bind_this_process
from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError
from ddptop.protocol.layout import events_name
from ddptop.protocol.wire import UNWRITABLE_MARK, EventWriter


def read_launch_spec(path: str, program: str) -> LaunchSpec | None:
    """The launch spec, or None after one line on stderr naming its problem (the rank then exits 2): before any
    event file exists, torchrun's log is where this shows."""
    try:
        return LaunchSpec.read(path)
    except LaunchSpecError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return None


def events_writer(spec: LaunchSpec, rank: int, flush_interval: float | None = None) -> EventWriter:
    """This rank's events file, opened for appending (OSError where it cannot even be opened), written at most
    every ``flush_interval`` seconds (the launch's by default)."""
    interval = spec.flush_interval if flush_interval is None else flush_interval
    return EventWriter(os.path.join(spec.events_dir, events_name(rank)), rank, interval)


def report_unwritable(rank: int | str, reason: str) -> None:
    """The one line a rank whose events file cannot be written leaves on stderr, where ddptop reads it."""
    print(f"{UNWRITABLE_MARK}rank {rank}: {reason}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this worker if its torchrun agent dies, so no orphan keeps a GPU busy."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the agent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except OSError:
        pass


def raise_on_stop_signals(exception: type[BaseException], only_here: bool = False) -> None:
    """SIGTERM and SIGINT (torchrun shutting the group down) raise ``exception`` with the signal's name, so the
    rank leaves through its normal flush path. With ``only_here``, a process forked from this one (a DataLoader's
    worker, which inherits the handler and gets the group's signal too) ends as it would have without it."""
    owner = os.getpid()

    def on_signal(signum: int, frame: Any) -> None:
        if only_here and os.getpid() != owner:
            if signum == signal.SIGINT:
                signal.default_int_handler(signum, frame)  # KeyboardInterrupt, which a loader's worker expects
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise exception(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def bind_cores(spec: LaunchSpec, local_rank: int) -> tuple[str, list[int] | None]:
    """Put this rank on its CPUs before anything starts a thread; how it is bound and the CPUs it may run on.

    CPU launches: the set ddptop planned for this local rank (launch.json's rank_cores). GPU launches: torchrun
    bound the process to its GPU's NUMA node before it started (--numa-binding), where numactl was found."""
    if spec.numa_binding:
        given = os.environ.get(NUMA_BINDING_ENV)
        how = (f"NUMA node of its GPU (torchrun --numa-binding={given})" if given == spec.numa_binding
               else "not bound: no numactl for torchrun's --numa-binding on this node")
        return bind_this_process(None, how)
    if spec.rank_cores is not None and os.environ.get(UNBOUND_ENV):
        return bind_this_process(None, f"not bound: {os.environ[UNBOUND_ENV]}")
    if spec.rank_cores is not None and not 0 <= local_rank < len(spec.rank_cores):
        return bind_this_process(None, f"not bound: no planned CPUs for local rank {local_rank}")
    planned = spec.rank_cores[local_rank] if spec.rank_cores is not None else None
    return bind_this_process(planned, spec.binding)


def launch_setup(torch: Any) -> dict[str, Any]:
    """What can make one GPU launch differ from another of the same configuration, beyond the versions:
    cuDNN's algorithm search (benchmark: chosen by timing at each launch, so it may choose differently) and
    determinism, and the NCCL settings of the environment (algorithm, protocol, channels). Neither the
    algorithms cuDNN chose nor the channels NCCL set up are captured (NCCL_DEBUG=INFO prints them into the
    rank logs kept in the launch directory)."""
    wanted = ("NCCL_", "TORCH_NCCL_")
    named = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING", "CUBLAS_WORKSPACE_CONFIG")
    return {
        "cudnn_enabled": bool(torch.backends.cudnn.enabled),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(wanted) or k in named},
    }


def package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def hello_fields(torch: Any, spec: LaunchSpec, device: Any, rank: int, world_size: int, local_rank: int,
                 binding: tuple[str, list[int] | None], name_device: bool = True) -> dict[str, Any]:
    """The ``hello`` event's fields: where the rank runs, on what, bound how, with which versions. Without
    ``name_device`` a GPU's name is not read (reading it starts CUDA, which a user's script must start itself)."""
    cuda = device.type == "cuda"
    if cuda:
        device_name = torch.cuda.get_device_name(device) if name_device else None
    else:
        device_name = platform.processor() or "cpu"
    return dict(
        world_size=world_size,
        local_rank=local_rank,
        launch=spec.launch_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        device=str(device),
        device_name=device_name,
        backend=spec.backend,
        threads=torch.get_num_threads(),
        binding=binding[0],
        cores=binding[1],
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        versions={
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": package_version("torchvision"),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        },
        **({"gpu_setup": launch_setup(torch)} if cuda and rank == 0 else {}),
    )


def error_fields(exc: BaseException, hint: str = "") -> dict[str, Any]:
    """The ``error`` event's own fields for ``exc``: its type, its message (``hint`` first), its traceback and
    whether it ran out of memory."""
    return dict(
        error_type=type(exc).__name__,
        message=(hint + str(exc))[:2000],
        traceback="".join(traceback.format_exception(exc))[-8000:],
        oom=is_oom(exc),
    )


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return "out of memory" in str(exc).lower()


def max_rss_bytes() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    except (ImportError, OSError):
        return None


def exit_without_teardown() -> None:
    """Leave with 0 and skip the interpreter's teardown, once the rank has finished: every event is written
    and closed by now and the process group destroyed. The C++ objects torch and gloo leave to static
    destructors have been seen to abort such a rank ("terminate called without an active exception",
    SIGABRT), which its torchrun agent then reports as a failed launch. A failing rank exits the usual way:
    the order in which ranks die is how the root cause of a failure is told from its echoes."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say there anyway
            stream.flush()
    os._exit(0)

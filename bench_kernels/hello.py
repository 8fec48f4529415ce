"""Who a rank is and where it runs: its CPUs, bound before torch starts a thread (``bind_cores``), and the
fields of its ``hello`` event (host, device, threads, CPUs, versions; rank 0 of a GPU launch adds what can
make one launch differ from another of the same configuration, ``launch_setup``)."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any

from ddptop.protocol.affinity import NUMA_BINDING_ENV, UNBOUND_ENV, bind_this_process
from ddptop.protocol.launchspec import LaunchSpec


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


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def hello_fields(torch: Any, spec: LaunchSpec, device: Any, rank: int, world_size: int, local_rank: int,
                 binding: tuple[str, list[int] | None], name_device: bool = True) -> dict[str, Any]:
    """The fields of the rank's ``hello``, said once the process group has formed; ``binding`` is
    ``bind_cores``' answer. Without ``name_device`` a GPU's name is not read (reading it starts CUDA, which a
    user's script must start itself)."""
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
            "torchvision": _version("torchvision"),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        },
        **({"gpu_setup": launch_setup(torch)} if cuda and rank == 0 else {}),
    )

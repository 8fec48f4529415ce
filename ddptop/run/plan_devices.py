"""Where a plan runs: its device (or the CPU beside the GPUs), the GPUs chosen, MIG instances, ranks per node,
the backends, and the CPU's ranks x threads splits. Each step one ``PlanError`` line for what cannot run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptop.errors import PlanError
from ddptop.protocol import strategies as strategies_mod
from ddptop.protocol import variants as variants_mod
from ddptop.run.options import AUTO, BACKENDS, DEVICES, PlanOptions, unique
from ddptop.run.plan_records import share_of_cores
from ddptop.telemetry.inventory import Inventory, devices_for


def resolve_device(device: str, inventory: Inventory) -> str:
    """auto is cuda where a GPU is usable, else cpu."""
    if device not in DEVICES:
        raise PlanError(f"--device must be one of {', '.join(DEVICES)} (got {device!r})")
    usable = inventory.usable_gpus
    if device == "cuda" and not usable:
        raise PlanError(f"--device cuda, but no GPU is usable: {inventory.usable_problem}")
    return device if device != "auto" else ("cuda" if usable else "cpu")


COMPARED_DEVICES = ("cpu", "cuda")


def resolve_devices(options: PlanOptions, inventory: Inventory) -> tuple[str, tuple[str, ...], dict[str, str]]:
    """The plan's device, the devices compared (--devices cpu,cuda) and those left out with the reason: the
    GPUs run the plan's usual sweep and the CPU its split of the cores beside them; without a usable GPU the
    plan is the CPU part alone, and says why."""
    asked = unique(options.devices or [])
    if not asked:
        return resolve_device(options.device, inventory), (), {}
    unknown = [d for d in asked if d not in COMPARED_DEVICES]
    if unknown or len(asked) != 2:
        raise PlanError(f"--devices compares the CPU with the GPUs: cpu,cuda (got {','.join(asked)}; one "
                        "device: --device)")
    if options.device != AUTO:
        raise PlanError("--device and --devices together: --devices cpu,cuda already names both")
    if inventory.usable_gpus:
        return "cuda", tuple(COMPARED_DEVICES), {}
    return "cpu", ("cpu",), {"cuda": f"no GPU is usable: {inventory.usable_problem}"}


def check_threads(options: PlanOptions, inventory: Inventory, cpu_count: int, nnodes: int,
                   devices: tuple[str, ...]) -> tuple[int, ...]:
    """The thread counts of --threads, each at least 1 and at most the usable cores."""
    counts = tuple(sorted(unique(options.threads or [])))
    asked = "--threads" if counts else "--devices"
    if (counts or devices) and nnodes > 1:
        raise PlanError("--threads and --devices measure one node: drop --nnodes")
    if (counts or devices) and options.tune:
        raise PlanError("ddptop tune measures one split of one device: drop --threads and --devices")
    # each of these compares configurations of one device and one thread count: not across a thread sweep
    for name, given in (("--strategies", [s for s in options.strategies or [] if s != strategies_mod.DDP]),
                        ("--variants", [v for v in options.variants or [] if v != variants_mod.DEFAULT]),
                        ("--compare-dp", options.compare_dp)):
        if (counts or devices) and given:
            raise PlanError(f"{name} and {asked} are measured one at a time: run them as two sweeps")
    if counts and not devices and resolve_device(options.device, inventory) == "cuda":
        raise PlanError("--threads sweeps CPU ranks: add --device cpu, or --devices cpu,cuda for the GPUs beside")
    if counts and options.threads_per_rank is not None:
        raise PlanError("--threads sweeps the threads per rank: drop --threads-per-rank")
    for count in counts:
        if not 1 <= count <= cpu_count:
            raise PlanError(f"--threads {count}: each count must be 1 to the {cpu_count} usable cores")
    return counts


def cpu_grid(threads: tuple[int, ...], world_sizes: tuple[int, ...], cpu_count: int, device: str,
              devices: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The (ranks, threads per rank) splits measured on the CPU: every pair whose cores fit those usable (a
    thread sweep), or each world size at its share of the cores (the CPU part of --devices without
    --threads). Empty when the CPU runs the plan's usual sweep."""
    cpu_part = device == "cuda" and "cpu" in devices
    if not threads and not cpu_part:
        return ()
    # the CPU part keeps the GPUs' world sizes whose ranks fit the cores; a CPU plan's are the user's own
    sizes = [n for n in world_sizes if n * min(threads or (1,)) <= cpu_count] if cpu_part else list(world_sizes)
    if not threads:
        return tuple((n, max(1, cpu_count // n)) for n in sizes)
    grid = tuple((n, t) for n in sizes for t in threads if n * t <= cpu_count)
    unplaced = [n for n in sizes if not any(size == n for size, _ in grid)]
    if unplaced or not grid:
        n = (unplaced or sizes or [0])[0]
        raise PlanError(f"--world-sizes {n} with --threads {min(threads)}: {n * min(threads)} cores, more than "
                        f"the {cpu_count} usable")
    return grid


def resolve_gpus(indices: list[int] | None, device: str, visible: int) -> tuple[int, ...] | None:
    """The GPUs chosen with --gpus (None: every usable one)."""
    if indices is None:
        return None
    if device != "cuda":
        raise PlanError("--gpus needs GPUs, but this plan runs on the CPU")
    if len(set(indices)) != len(indices):
        raise PlanError(f"--gpus lists a GPU twice: {','.join(map(str, indices))}")
    for index in indices:
        if not 0 <= index < visible:
            raise PlanError(f"--gpus {index}: only GPUs 0..{visible - 1} are visible")
    return tuple(indices)


def chosen_gpus(inventory: Inventory, gpus: tuple[int, ...] | None) -> list[Any]:
    usable = list(inventory.usable_gpus)
    return usable if gpus is None else [usable[p] for p in gpus]


def rank_devices(inventory: Inventory, gpus: tuple[int, ...] | None, on_gpu: bool) -> tuple[tuple[str, ...], bool]:
    """Each local rank's device by UUID (from NVML), and whether each rank must see only its own (MIG)."""
    return devices_for(inventory, gpus) if on_gpu else ((), False)


def check_mig(inventory: Inventory, gpus: tuple[int, ...] | None, rank_devices: tuple[str, ...],
               per_rank: bool, backends: tuple[str, ...], options: PlanOptions,
               world_sizes: tuple[int, ...]) -> tuple[str, ...]:
    """MIG instances: one per rank; NCCL will not put two ranks on instances of one GPU, DataParallel cannot
    drive them. With --backend auto such a plan uses gloo (which runs on CUDA tensors by host copies)."""
    if not per_rank:
        return backends
    if options.compare_dp:
        raise PlanError("--compare-dp: DataParallel drives several GPUs from one process, but a process may use "
                        "only one MIG instance")
    chosen = chosen_gpus(inventory, gpus)
    largest = max((n for n in world_sizes), default=1)
    parents = [gpu.index for gpu in chosen[:largest]]
    if "nccl" not in backends or len(set(parents)) == len(parents):
        return backends
    if "nccl" in options.backend:
        raise PlanError("--backend nccl: NCCL does not run several ranks on MIG instances of one GPU; "
                        "use --backend gloo, or whole GPUs")
    return unique(["gloo" if b == "nccl" else b for b in backends])


def ranks_per_node(nnodes: int, per_node: int | None, on_gpu: bool, devices_per_node: int) -> int | None:
    """--nproc-per-node, checked against --nnodes and this node's devices (None: the default)."""
    if nnodes < 1:
        raise PlanError(f"--nnodes must be at least 1 (got {nnodes})")
    if per_node is not None:
        if per_node < 1:
            raise PlanError(f"--nproc-per-node must be at least 1 (got {per_node})")
        if on_gpu and per_node > devices_per_node:
            raise PlanError(f"--nproc-per-node {per_node}: only {devices_per_node} GPUs are usable on this node")
        if nnodes == 1:
            raise PlanError("--nproc-per-node only applies with --nnodes above 1")
    return per_node


def resolve_backends(requested: list[str], on_gpu: bool) -> tuple[str, ...]:
    """auto is nccl on GPUs and gloo on the CPU; a list sweeps them."""
    backends = []
    for backend in requested:
        if backend not in BACKENDS:
            raise PlanError(f"--backend must be auto, nccl or gloo (got {backend!r})")
        if backend == "nccl" and not on_gpu:
            raise PlanError("--backend nccl needs GPUs; use gloo (or auto) on the CPU")
        backends.append(backend if backend != "auto" else ("nccl" if on_gpu else "gloo"))
    return unique(backends)


def threads_per_rank(
    fixed: int | None, cpu_count: int, world_sizes: tuple[int, ...], nnodes: int, per_node: int
) -> dict[int, int]:
    """CPU threads per rank at each world size (and at 1, for the baselines).

    Each rank gets an equal share of the cores this process may use, so N ranks never oversubscribe the node
    and N=1 is not starved (torchrun's own default is one thread per rank).
    """
    return {n: fixed or share_of_cores(cpu_count, n, nnodes, per_node) for n in (*world_sizes, 1)}


def as_written_threads(fixed: int | None, environ: Mapping[str, str], share: int, per_node: int) -> tuple[int, str]:
    """A script's tune on the CPU: the threads each rank of the script as written runs, as its own launch would
    give them, and where that count comes from. ``--threads-per-rank``, else the environment's OMP_NUM_THREADS
    (torchrun passes it on), else torchrun's default: 1 with several ranks a node; one rank a node gets its
    ``share`` of the cores ddptop may use (torch alone would take the machine's physical cores, which a SLURM job
    or a container may not allow)."""
    if fixed:
        return fixed, f"--threads-per-rank {fixed}"
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given), f"OMP_NUM_THREADS={int(given)} in the environment"
    if per_node > 1:
        return 1, "torchrun's default with several ranks a node"
    return share, "one rank a node: all the cores ddptop may use"

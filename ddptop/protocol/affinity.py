"""Which CPUs each local rank of a CPU launch runs on (standard library only).

ddptop plans the sets (``assign_cores``) from the CPUs its own process may use (``os.sched_getaffinity``: a
container or a SLURM job often allows fewer than the machine has) and the sysfs topology, and writes them
into launch.json (``LaunchSpec.rank_cores``); each rank applies its own set first thing
(``bind_this_process``), before torch starts a thread, so every thread it starts later inherits the set.

The sets are disjoint: one logical CPU per physical core while there are enough physical cores (a
hyperthread sibling shares its core's execution units, so two ranks on siblings slow each other down), both
siblings of whole cores when there are not, and each rank inside one NUMA node where the threads fit. Where
the ranks and their threads need more CPUs than there are, nothing is bound: two ranks pinned to one core
could not use a core the other one left idle, which an unpinned scheduler can.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddptop.protocol.kernel_files import parse_cpu_list, read_kernel_file

SYSFS = "/sys"

# How a rank's CPUs were chosen, as its hello says it (``binding``); "not bound: ..." otherwise.
PHYSICAL = "one logical CPU per physical core"
SIBLINGS = "whole physical cores, hyperthread siblings included"
OFF = "not bound: --no-bind-cores"
# Set in a GPU launch's agent environment when torchrun was given --numa-binding (its value is the mode).
NUMA_BINDING_ENV = "DDPTOP_NUMA_BINDING"
# Set by the launcher, to why not, where the planned sets must not be applied: several nodes of one launch
# rehearsed on this one machine would each put their local rank k on the same CPUs.
UNBOUND_ENV = "DDPTOP_UNBOUND"


@dataclass(frozen=True)
class CorePlan:
    """Each local rank's CPUs (None: the ranks are not bound) and how they were chosen (or why not)."""

    cores: tuple[tuple[int, ...], ...] | None
    how: str


def cpu_places(cpus: set[int] | list[int], sysfs_root: str = SYSFS) -> dict[int, tuple[int, int, int]]:
    """Each CPU's (NUMA node, package, core id) from sysfs; a CPU sysfs does not describe is its own core on
    node 0, so a machine without the files gets one CPU per "core" in number order."""
    node_of: dict[int, int] = {}
    node_dir = os.path.join(sysfs_root, "devices", "system", "node")
    try:
        names = os.listdir(node_dir)
    except OSError:
        names = []
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            for cpu in parse_cpu_list(read_kernel_file(os.path.join(node_dir, name, "cpulist")) or ""):
                node_of[cpu] = int(name[4:])
    places = {}
    for cpu in cpus:
        topology = os.path.join(sysfs_root, "devices", "system", "cpu", f"cpu{cpu}", "topology")
        package, core = (read_kernel_file(os.path.join(topology, name)) for name in ("physical_package_id", "core_id"))
        if package is not None and core is not None and package.lstrip("-").isdigit() and core.isdigit():
            places[cpu] = (node_of.get(cpu, 0), int(package), int(core))
        else:
            places[cpu] = (node_of.get(cpu, 0), -1, cpu)  # unknown: a core of its own
    return places


def assign_cores(available: set[int] | list[int], ranks: int, threads: int,
                 places: dict[int, tuple[int, int, int]] | None = None) -> CorePlan:
    """Disjoint CPU sets for ``ranks`` local ranks of ``threads`` threads each, from the ``available`` CPUs.

    ``places``: each CPU's (NUMA node, package, core id), as ``cpu_places`` reads them (None: every CPU a core
    of its own on one node). Pure: the same arguments give the same sets.
    """
    cpus = sorted(set(available))
    if ranks < 1 or threads < 1:
        return CorePlan(None, "not bound: no ranks or no threads")
    places = places or {}
    where = {cpu: places.get(cpu, (0, -1, cpu)) for cpu in cpus}
    cores: dict[tuple[int, int, int], list[int]] = {}  # physical core -> its available logical CPUs
    for cpu in sorted(cpus, key=lambda c: (where[c], c)):
        cores.setdefault(where[cpu], []).append(cpu)
    need = ranks * threads
    if len(cores) >= need:  # one logical CPU of each physical core, siblings left idle
        units, how = [[siblings[0]] for siblings in cores.values()], PHYSICAL
    elif len(cpus) >= need:  # whole cores, siblings next to each other, so a rank gets both of a core's CPUs
        units, how = [[cpu] for siblings in cores.values() for cpu in siblings], SIBLINGS
    else:
        return CorePlan(None, f"not bound: {ranks} rank(s) x {threads} thread(s) need {need} CPUs, "
                              f"{len(cpus)} allowed")
    by_node: dict[int, list[int]] = {}
    for unit in units:
        by_node.setdefault(where[unit[0]][0], []).extend(unit)
    sets = _within_nodes(list(by_node.values()), ranks, threads)
    if sets is None:  # the threads of some rank cannot fit in one node: take them in order across nodes
        flat = [cpu for unit in units for cpu in unit]
        sets = [flat[r * threads:(r + 1) * threads] for r in range(ranks)]
    return CorePlan(tuple(tuple(sorted(s)) for s in sets), how)


def _within_nodes(nodes: list[list[int]], ranks: int, threads: int) -> list[list[int]] | None:
    """Every rank's threads inside one NUMA node, nodes filled in order; None where they do not all fit."""
    sets: list[list[int]] = []
    for node in nodes:
        while len(sets) < ranks and len(node) >= threads:
            sets.append(node[:threads])
            node = node[threads:]
    return sets if len(sets) == ranks else None


def bind_this_process(planned: tuple[int, ...] | None, how: str) -> tuple[str, list[int] | None]:
    """Bind the calling process to its planned CPUs (those of them it may use here); how it is bound and the
    CPUs it may run on now (None where the platform cannot say).

    Call before the process starts threads: a thread keeps the affinity it was started with."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return "not bound: this platform has no CPU affinity", None
    if planned:
        usable = set(planned) & allowed  # another node of a multi-node launch may allow other CPUs
        if not usable:
            how = "not bound: none of its planned CPUs is allowed here"
        else:
            try:
                os.sched_setaffinity(0, usable)
            except OSError as exc:
                how = f"not bound: sched_setaffinity failed ({exc.strerror})"
            else:
                if usable != set(planned):
                    how += f" ({len(usable)} of its {len(planned)} planned CPUs allowed here)"
        try:
            allowed = os.sched_getaffinity(0)
        except OSError:
            pass
    return how, sorted(allowed)

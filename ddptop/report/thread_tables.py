"""The thread curve, the best split of the cores and the CPU against the GPUs as report blocks
(``analysis/threads.py`` makes the figures; ``report/sections.py`` places the blocks). Narrow on purpose: each
table reads whole at 80 columns."""

from __future__ import annotations

from ddptop import units
from ddptop.records import value_of
from ddptop.report.blocks import Block, Caption, Note, Part, Table
from ddptop.report.schema import Amdahl, CoreBudget, Summary

THREAD_HEADER = ("threads", "cores", "s/iter", "ex/s", "speedup", "efficiency", "serial frac.")
BUDGET_HEADER = ("ranks x threads", "cores", "global batch", "s/iter", "ex/s", "")
DEVICE_HEADER = ("device", "", "split", "ex/s", "SU-hours per 1M ex.")
BOUND_NOTE = ("Each rank runs torch.set_num_threads(t), OMP_NUM_THREADS=t, bound to t cores of its own "
              "(sched_setaffinity); each thread count is its own launch.")


def _times(value: float) -> str:
    return units.number(value, 2, "x")


def _three(value: float) -> str:
    return units.number(value, 3)


def _amdahl_text(fit: Amdahl) -> str:
    """Amdahl's fit over the threads, or why it does not fit (bounded, a fraction outside [0, 1] would state a
    law the data contradict: more threads that slowed the step, or a superlinear speedup)."""
    raw = value_of(fit.raw_serial_fraction) or 0.0
    fitted = units.estimate(fit.raw_serial_fraction, _three)
    if raw > 1:
        return (f"Amdahl's law does not fit over the threads: more threads made the step slower, which no fixed "
                f"serial part explains (fitted serial fraction {fitted}).")
    if raw < 0:
        return (f"Amdahl's law does not fit over the threads: the speedup is above the thread count (superlinear), "
                f"so there is no serial part to fit (fitted serial fraction {fitted}).")
    fraction = units.estimate(fit.serial_fraction, _three)
    most = value_of(fit.max_speedup)
    limit = f", so at most {most:.1f}x from threads alone" if most else ""
    return f"Amdahl's law over the threads: serial fraction {fraction}{limit}."


def thread_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.threads:
        parts.append(Caption(f"Threads: {table.model}, {units.count(table.world_size, 'rank')}, "
                             f"batch {table.batch_size} {table.batch_meaning} ({table.backend}); speedup over "
                             f"{units.count(table.reference_threads, 'thread')}, 95% intervals"))
        rows = [(str(r.threads), str(r.cores), units.estimate(r.sec_iter, _three),
                 units.estimate(r.ex_sec_total, units.rate), units.estimate(r.speedup, _times),
                 units.estimate(r.efficiency, units.percent), units.estimate(r.karp_flatt, _three))
                for r in table.rows]
        parts.append(Table(THREAD_HEADER, rows, first_left=True))
        if table.amdahl:
            parts.append(Note(_amdahl_text(table.amdahl)))
        if table.recommendation:
            parts.append(Note(table.recommendation))
    if parts:
        parts.append(Note(BOUND_NOTE))
    return Block("Threads per rank", parts) if parts else Block()


def core_budget_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.core_budget:
        cores = f"{table.cores} cores" if table.cores else "the cores"
        parts.append(Caption(f"Core budget: {table.model}, batch {table.batch_size} ({table.backend}): every "
                             f"ranks x threads split of {cores} measured; examples/s of all ranks, 95% intervals"))
        rows = [(f"{c.world_size} x {c.threads}", str(c.cores), "" if c.global_batch is None else str(c.global_batch),
                 units.number(c.sec_iter, 3),
                 units.estimate(c.ex_sec_total, units.rate), "best" if c.config_id == table.best_config_id else
                 "highest" if c.config_id == table.measured_highest else "")
                for c in table.cells]
        parts += [Table(BUDGET_HEADER, rows, first_left=True), *_grid(table), Note(table.answer)]
    return Block("Core budget: ranks x threads", parts) if parts else Block()


def _grid(table: CoreBudget) -> list[Part]:
    """The splits as the grid they are: ranks down, threads per rank across, examples/s in each cell; "-"
    where the split needs more cores than there are, "?" where it fits but was not measured (it failed)."""
    cells = {(c.world_size, c.threads): c for c in table.cells}
    ranks = sorted({n for n, _ in cells})
    threads = sorted({t for _, t in cells})
    if len(ranks) < 2 or len(threads) < 2:
        return []  # one row or one column: the list above is the grid
    cores = table.cores

    def cell(n: int, t: int) -> str:
        if (n, t) in cells:
            return units.rate(value_of(cells[(n, t)].ex_sec_total))
        return "-" if cores and n * t > cores else "?"
    rows = [(str(n), *(cell(n, t) for t in threads)) for n in ranks]
    return [Caption("examples/s by ranks (down) and threads per rank (across); - needs more cores than there are"),
            Table(("ranks", *(f"{t} thr" for t in threads)), rows, first_left=True)]


def devices_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.devices_compared:
        parts.append(Caption(f"CPU against GPU: {table.model}, batch {table.batch_size} "
                             f"{table.batch_meaning}; each device's fastest and cheapest "
                             "configuration, 95% intervals"))
        rows = []
        for device in ("cpu", "cuda"):
            fastest, cheapest = table.side(device), table.side(f"{device}_cheapest")
            for what, side in (("fastest", fastest), ("cheapest", cheapest)):
                if not side or (what == "cheapest" and fastest and side.config_id == fastest.config_id):
                    continue
                split = (f"{side.world_size} x {units.count(side.threads or 0, 'thread')}" if device == "cpu"
                         else units.count(side.world_size, "GPU"))
                both = what if not (fastest and cheapest and fastest.config_id == cheapest.config_id) else (
                    "fastest, cheapest")
                rows.append((device, both, split, units.estimate(side.ex_sec_total, units.rate),
                             units.number(side.su_hours_per_million, 2)))
        if rows:
            parts.append(Table(DEVICE_HEADER, rows, first_left=True))
        parts.append(Note(table.answer))
    if parts:
        parts.append(Note("Service units: SU = (w_core * cores + w_gpu * GPUs) * wall time in hours, per example here; the "
                          "cores are those the ranks were given (threads per rank x ranks). Set the weights with "
                          "--su-core-weight and --su-gpu-weight to your cluster's charges."))
    return Block("CPU against GPU", parts) if parts else Block()


def answers(summary: Summary) -> list[str]:
    """The thread curve's, the core budget's and the CPU-against-GPU answers, one line each: what a run of
    --threads or --devices ends with, under its full report."""
    lines = [f"Threads ({table.model}, {units.count(table.world_size, 'rank')}): {table.recommendation}"
             for table in summary.threads if table.recommendation]
    lines += [table.answer for table in summary.core_budget if table.answer]
    lines += [table.answer for table in summary.devices_compared if table.answer]
    return lines

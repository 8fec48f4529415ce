"""The load during the measured steps (telemetry) as a report block: per configuration its GPUs' use, memory
peak, power and energy, the host's CPU and its ranks' CPU and RSS, and the GPM counters where the GPUs have
them (``telemetry/timeline.py`` makes the figures; ``report/sections.py`` places the block)."""

from __future__ import annotations

from ddptop import units
from ddptop.protocol.vocab import Mode
from ddptop.report.blocks import Block, Note, Part, Table
from ddptop.report.cells import config_name, not_measured, unlisted_note
from ddptop.report.schema import Config, Summary, WindowLoad
from ddptop.telemetry.validity import NO_READING

LOAD_HEADER = (
    "config", "GPUs", "readings", "util mean", "util max", "GPU mem peak", "power mean", "J/example", "host CPU",
    "rank readings", "rank RSS peak", "rank CPU mean",
)
NVML, ALLOCATOR = "nvml", "allocator"  # where the load table's GPU memory peak comes from


def memory_peak_shown(nvml_peak: int | None, allocator_peak: int | None, ranks_on_gpus: int, mode: str,
                      world_size: int) -> tuple[int | None, str | None]:
    """The GPU memory peak the load table shows, and its source: NVML's largest reading of the memory in use,
    or the allocator's peak of the same configuration (``torch.cuda.max_memory_allocated``, the largest over its
    ranks and launches) where that is larger and every rank of the configuration ran on a GPU these readings
    cover. The memory in use on a GPU is never below what its allocator holds, so a larger allocator peak
    means the readings missed the peak. (None, None) without an NVML memory reading."""
    if nvml_peak is None:
        return None, None
    ranks = 1 if mode in (Mode.NO_DDP, Mode.DP) else world_size
    if allocator_peak is not None and allocator_peak > nvml_peak and ranks_on_gpus >= ranks:
        return allocator_peak, ALLOCATOR
    return nvml_peak, NVML


def memory_peak(entry: Config, load: WindowLoad) -> tuple[int | None, str | None]:
    """The GPU memory peak a configuration's row shows, and its source: the stored figure, or for a summary
    saved before it was stored, the same rule over the entry."""
    if load.mem_peak_source is not None:
        return load.mem_peak_shown_bytes, load.mem_peak_source
    on_gpus = sum(1 for rank in load.ranks.values() if rank.gpu is not None and rank.gpu in load.gpus)
    return memory_peak_shown(load.mem_peak_bytes, entry.peak_memory_bytes, on_gpus, entry.mode, entry.world_size)


def rss_peak(load: WindowLoad) -> int | None:
    """The largest peak RSS of any rank (None: no rank was sampled)."""
    return max((r.peak_rss_bytes or 0 for r in load.ranks.values()), default=None)


def _readings(load: WindowLoad) -> str:
    """How many readings the window's figures rest on; "1 after": the first reading after a window shorter
    than the interval between readings."""
    if load.readings is None:
        return units.DASH
    return f"{load.readings} after" if load.coarse else str(load.readings)


def _rank_readings(load: WindowLoad) -> str:
    counts = sorted({r.readings for r in load.ranks.values() if r.readings is not None})
    if not counts:
        return units.DASH
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _has_row(entry: Config) -> bool:
    """Read during its measured steps: a configuration with no measured step had no window to read the load of
    (it is named under the table, with why)."""
    return bool(entry.telemetry) and entry.stats is not None


def _load_cells(entry: Config) -> tuple[str, ...] | None:
    load = entry.telemetry
    if load is None or not _has_row(entry):
        return None
    cpus = [r.cpu_mean for r in load.ranks.values() if r.cpu_mean is not None]
    peak, source = memory_peak(entry, load)
    return (
        config_name(entry),
        ",".join(map(str, load.gpus)) or units.DASH,
        _readings(load),
        units.percent(load.util_mean, fraction=False),
        units.percent(load.util_max, fraction=False),
        units.binary_bytes(peak) + (" (allocator)" if source == ALLOCATOR else ""),
        units.number(load.power_mean_w, 0, " W"),
        units.significant(load.energy_per_example_j),
        units.percent(load.host_cpu_mean, fraction=False),
        _rank_readings(load),
        units.binary_bytes(rss_peak(load)),
        units.percent(sum(cpus) / len(cpus) if cpus else None, fraction=False),
    )


GPM_HEADER = ("SM active", "SM occupancy", "tensor active", "DRAM active")
GPM_LOAD_KEYS = ("sm_active_mean", "sm_occupancy_mean", "tensor_active_mean", "dram_active_mean")


def _counted(summary: Summary) -> bool:
    """Whether any configuration has GPM hardware counters (Hopper and later)."""
    return any(e.telemetry and e.telemetry.sm_active_mean is not None for e in summary.configs)


def _without_row(entry: Config) -> str:
    """Why a configuration has no row in the load table: not measured, or no reading in its measured window
    (the validity check's own note where it made one, as it could not check the node either)."""
    notes = entry.validity.notes if entry.validity else []
    return not_measured(entry) or (NO_READING if NO_READING in notes else
                                   "no telemetry reading during the measured steps")


def load_rows(summary: Summary) -> list[tuple[str, ...]]:
    counted = _counted(summary)
    rows = []
    for entry in summary.configs:
        cells = _load_cells(entry)
        if cells is None or entry.telemetry is None:
            continue  # named under the table (``_has_row``, ``_without_row``)
        load = entry.telemetry
        rows.append(cells + (tuple(units.percent(load.gpm(k), fraction=False) for k in GPM_LOAD_KEYS)
                             if counted else ()))
    return rows


def _load_header(summary: Summary) -> tuple[str, ...]:
    return LOAD_HEADER + (GPM_HEADER if _counted(summary) else ())


def load_notes(summary: Summary) -> list[str]:
    """What a reader needs to read the load table's marks, only where a row has them."""
    loads = [(e, e.telemetry) for e in summary.configs if e.telemetry]
    notes = []
    if any(load.coarse or (load.readings is not None and load.readings < 3) for _, load in loads):
        notes.append("readings: the telemetry readings in the measured window (the last used launch's) behind its "
                     "GPU and host figures; with one reading its util mean and max are that reading; \"1 after\": "
                     "the window was shorter than the interval between readings and the first reading after it "
                     "stands for it. rank readings: those behind the rank figures (the configuration's time).")
    if any(memory_peak(e, load)[1] == ALLOCATOR for e, load in loads):
        notes.append("GPU mem peak \"(allocator)\": the allocator's peak of the same configuration "
                     "(torch.cuda.max_memory_allocated), above every NVML reading of its GPUs: the readings missed "
                     "the peak, and the GPU held at least this (NVML's own figure: telemetry.mem_peak_bytes).")
    return notes


def load_block(summary: Summary) -> Block:
    """The load table, and a note naming every configuration it has no row for and why; nothing where the run
    read no telemetry at all (no timeline: the environment says why)."""
    rows = load_rows(summary)
    read = bool(summary.telemetry and summary.telemetry.readings)
    if not rows and not read:
        return Block()
    info = (summary.telemetry.info if summary.telemetry else None) or {}
    title = "Load during measured steps (telemetry"
    title += f", {info['fake_label']} GPUs)" if info.get("fake") else ")"
    parts: list[Part] = [Table(_load_header(summary), rows, first_left=True)] if rows else []
    missing = unlisted_note(summary.configs, {e.config_id for e in summary.configs if _has_row(e)}, _without_row)
    return Block(title, parts + [Note(note) for note in load_notes(summary) + ([missing] if missing else [])])

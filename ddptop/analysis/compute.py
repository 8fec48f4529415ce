"""Achieved FLOP/s and model FLOPs utilisation (MFU), against the datasheet and against the measured ceiling.

Per configuration, from what its rank 0 counted (``flops_per_step``: one forward and backward of its batch,
``torch.utils.flop_counter``) and the median step time:
- achieved FLOP/s per device = FLOPs per step / p50 (DataParallel: the global batch's FLOPs over its N
  GPUs); for all devices together, times their number;
- MFU = achieved per device / the device's dense datasheet peak in the step's dtype
  (``analysis/datasheet_peaks.py``);
- share of the measured ceiling = achieved / the best matmul FLOP/s the same device reached in that dtype
  after the steps of the sweep's first launch (``bench_kernels/ceiling.py``). On the CPU the node is the device: all ranks'
  FLOP/s against the ceiling rank 0 measured with the first launch's threads.
Where convolutions and matmuls run in different dtypes (on a GPU, by default, cuDNN's convolutions in TF32
and cuBLAS's matmuls in full FP32), the peak is the one the step's own mix would reach: its FLOPs over the
time each kind's FLOPs would take at its own dtype's peak (``flops_by_kind``, ``dtype_by_kind``), so a
matmul-heavy model is held against the FP32 peak, not the TF32 one eight times higher.
The 95% interval of the p50 carries over (FLOP/s falls as the step time rises).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ddptop.analysis.datasheet_peaks import peak_flops
from ddptop.records import BOOTSTRAP, Estimate


def step_parts(info: Mapping[str, Any], per_step: float, dtype: str) -> list[tuple[float, str]]:
    """The step's FLOPs as (FLOPs, dtype) per op kind where the kernel counted them so, else the whole step
    in its one dtype."""
    by_kind, dtypes = info.get("flops_by_kind"), info.get("dtype_by_kind")
    if isinstance(by_kind, Mapping) and isinstance(dtypes, Mapping):
        parts = [(float(flops), str(dtypes[kind])) for kind, flops in by_kind.items()
                 if isinstance(flops, (int, float)) and flops > 0 and kind in dtypes]
        if parts:
            return parts
    return [(float(per_step), dtype)]


def mixed_peak(parts: Sequence[tuple[float, str]], peak_of: Any) -> float | None:
    """The FLOP/s the step's mix reaches when each part runs at ``peak_of(dtype)``: all its FLOPs over the
    sum of the parts' times (None where a part's dtype has no peak)."""
    seconds = 0.0
    for flops, dtype in parts:
        peak = peak_of(dtype)
        if not peak:
            return None
        seconds += flops / peak
    total = sum(flops for flops, _ in parts)
    return total / seconds if seconds > 0 else None


def _ceiling_for(ceilings: Sequence[Mapping[str, Any]], dtype: str | None, device_name: str | None) -> float | None:
    found = [c for c in ceilings if c.get("dtype") == dtype and (device_name is None or c.get("device_name") in
                                                                   (device_name, None))]
    values = [c["flops_per_s"] for c in found if isinstance(c.get("flops_per_s"), (int, float))]
    return max(values) if values else None


def compute_figures(entry: Mapping[str, Any], info: Mapping[str, Any], device_name: str | None,
                    ceilings: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``flops`` block of one configuration's summary entry, or None without a count or a step time."""
    per_step = info.get("flops_per_step")
    stats = entry.get("stats") or {}
    p50 = (stats.get("sec_iter") or {}).get("p50")
    if not isinstance(per_step, (int, float)) or per_step <= 0 or not p50:
        return None
    dp = entry.get("mode") == "dp"
    devices = int(entry.get("world_size") or 1)
    on_gpu = entry.get("device") == "cuda"
    dtype = info.get("compute_dtype") or ("fp32" if not entry.get("amp") else entry["amp"])
    parts = step_parts(info, per_step, dtype)
    per_device_flops = per_step / devices if dp else per_step  # DataParallel counted the global batch

    def rate(seconds: float) -> float:
        return per_device_flops / seconds

    interval = stats.get("p50_ci")
    # the step time's interval carried through each rate (a faster step is a higher rate: its ends swap)
    per_device_range = ([rate(interval[1]), rate(interval[0])]
                     if interval and None not in interval and min(interval) > 0 else None)

    def figure(of: Callable[[float], float]) -> Estimate:
        """A figure of the achieved FLOP/s per device (increasing in it), with the interval that follows from the
        step time's where it has one."""
        if per_device_range is None:
            return Estimate(value=of(achieved))
        return Estimate(value=of(achieved), ci=[of(c) for c in per_device_range], method=BOOTSTRAP)

    achieved = rate(p50)
    figures: dict[str, Any] = {
        "per_step": per_step,
        "dtype": dtype,
        # each op kind's FLOPs and dtype, where the step's kinds run in different dtypes
        "by_kind": ([{"flops": flops, "dtype": kind_dtype} for flops, kind_dtype in parts]
                    if len({d for _, d in parts}) > 1 else None),
        "achieved_per_device": figure(lambda x: x),
        "achieved_total": achieved * devices,
        "device_name": device_name,
        # counted by torch's flop counter, or given by the workload (its flops(batch))
        "source": info.get("flops_source") or "counted",
        # ops that ran without a FLOP formula (counted 0): the figures are a lower bound where any are named
        "uncounted_ops": list(info.get("flops_uncounted") or []),
    }
    if not on_gpu:
        peak, source = None, "no datasheet peak for a CPU"
    elif len({d for _, d in parts}) == 1:
        peak, source = peak_flops(device_name, parts[0][1])
    else:
        peak = mixed_peak(parts, lambda d: peak_flops(device_name, d)[0])
        sources = [peak_flops(device_name, d)[1] for d in sorted({d for _, d in parts})]
        source = "; ".join(sources) + ("; weighted by the step's FLOPs in each" if peak else "")
    figures["datasheet_peak"], figures["datasheet_source"] = peak, source
    figures["mfu_datasheet"] = figure(lambda x: x / peak) if peak else None
    # the ceiling of this configuration's own device (a CPU part beside GPUs has the CPU's)
    ceiling = mixed_peak(parts, lambda d: _ceiling_for(ceilings, d, device_name))
    figures["ceiling"] = ceiling
    # on the CPU the node is one device: every rank's FLOP/s against the node's ceiling
    scale = 1 if on_gpu else devices
    figures["mfu_ceiling"] = figure(lambda x: x * scale / ceiling) if ceiling else None
    return figures

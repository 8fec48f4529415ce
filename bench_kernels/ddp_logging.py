"""DDP's own timers, read from its logging data (``_get_ddp_logging_data``, a private API: absent or changed
means "not available"): where the measured steps begin, and the per-iteration averages over them. The kernel's
communication analysis and a user's script under the probe both read them; torch-free, so that the probe in
the user's process imports nothing of the kernel's training loop.
"""

from __future__ import annotations

from typing import Any

DDP_LOGGING_TIMES = (
    "avg_forward_compute_time",
    "avg_backward_compute_time",
    "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time",
)


def _records_every_step(net: Any) -> bool:
    """Whether DDP records every step of ``net`` (``wrap_in_ddp`` set its sample rate to 1 where torch has
    the setter) and a step's record can be asked for after it (``Logger.set_runtime_stats_and_log``)."""
    logger = getattr(net, "logger", None)
    return (hasattr(net, "_set_ddp_runtime_logging_sample_rate")
            and callable(getattr(logger, "set_runtime_stats_and_log", None)))


def _logging_data(net: Any, record: bool) -> dict[str, Any] | None:
    getter = getattr(net, "_get_ddp_logging_data", None)
    if getter is None:
        return None
    try:
        if record:
            net.logger.set_runtime_stats_and_log()
        return dict(getter())
    except Exception:  # noqa: BLE001 - a private API: absent or changed means "not available"
        return None


def ddp_logging_mark(net: Any) -> dict[str, Any] | None:
    """DDP's logging data between two steps, the step just run recorded: where the measured steps begin.

    DDP records a step's times at the next step's forward (``self.logger.set_runtime_stats_and_log()`` in
    ``DistributedDataParallel._pre_forward``, torch/nn/parallel/distributed.py), and its ``avg_*`` figures
    average every step recorded since the wrapper's first, the slow first steps of the warm-up included
    (logger.cpp ``calculate_avg_time``). Recorded here, then again after the measured steps, the difference
    is the measured steps' alone (``ddp_logging_times``). None where DDP does not record every step."""
    return _logging_data(net, record=True) if _records_every_step(net) else None


def _measured_averages(data: dict[str, Any], mark: dict[str, Any]) -> tuple[dict[str, float], int] | None:
    """The ``avg_*`` figures over the steps between ``mark`` and ``data`` (both taken by recording the step just
    run), and how many steps that is.

    With every step recorded, DDP's ``iteration`` is the number of steps recorded; the first forward after
    the mark records the mark's step once more (the same timer, so the same times, still in the mark's
    per-step fields), so it is taken out of the sum."""
    first, last = mark.get("iteration"), data.get("iteration")
    if not isinstance(first, int) or not isinstance(last, int) or last <= first:
        return None
    repeated = 1 if first > 0 else 0  # before any step (no warm-up) there was no step to record again
    averages: dict[str, float] = {}
    for key in DDP_LOGGING_TIMES:
        before, after, again = mark.get(key), data.get(key), mark.get(key.removeprefix("avg_")) if repeated else 0
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (before, after, again)):
            continue
        total = after * (last + repeated) - before * first - again
        if after > 0 and total > 0:
            averages[key] = total / (last - first)
    return averages, last - first


def ddp_logging_times(net: Any, since: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """DDP's own per-iteration averages (nanoseconds in torch, seconds here), where this torch has them: over
    the steps after ``since`` (a ``ddp_logging_mark``, with ``iterations`` saying how many), else over every
    step DDP recorded."""
    data = _logging_data(net, record=since is not None)
    if data is None:
        return None
    window = _measured_averages(data, since) if since is not None else None
    averages = window[0] if window is not None else data
    result: dict[str, Any] = {}
    for key in DDP_LOGGING_TIMES:
        value = averages.get(key)
        if isinstance(value, (int, float)) and value > 0:
            result[key.removeprefix("avg_").removesuffix("_time") + "_s"] = value / 1e9
    if window is not None:
        result["iterations"] = window[1]
    for key in ("bucket_cap_bytes", "num_buckets_reduced", "iteration"):
        if isinstance(data.get(key), int):
            result[key] = data[key]
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
    if isinstance(sizes, str) and sizes.strip():
        try:
            result["bucket_sizes"] = [int(v) for v in sizes.split(",")]
        except ValueError:
            pass
    return result or None

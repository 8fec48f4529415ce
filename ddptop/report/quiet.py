"""Was a configuration measured on a quiet node: the one rule the summary and the live view both apply.

Each launch's measured window is judged on its own (``telemetry.validity``: other processes' CPU, swap,
clock limits, strangers on a GPU, Xid, ECC); the configuration's figures use its quiet launches when it has
any, else all of them; and the configuration is judged over its measured window: the measured steps of its
last used launch, or (a configuration that did not end well) its whole time. ``report.build`` writes that
verdict into the summary; ``live.live_validity`` gives it to the live view once the window has closed, over
the same telemetry records, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection

from ddptop.protocol.vocab import Status
from ddptop.telemetry import validity


@dataclass
class Judged:
    """One configuration as the rule sees it."""

    # per launch that measured it: launch, disturbed, reasons, gpu_state, unsteady, used
    launches: list[dict[str, Any]]
    window: tuple[float, float] | None  # the measured window the configuration's verdict and load figures cover
    launch: str | None  # the launch that window belongs to
    validity: dict[str, Any] | None  # ``validity.window_validity`` over ``window``; None without one


def judge_launches(state: Any, records: list[dict[str, Any]], info: dict[str, Any] | None,
                   rank_pids: Collection[int] = frozenset()) -> list[dict[str, Any]]:
    """Each launch's measured window judged on its own (was the node quiet?), and which launches the
    configuration's figures use: the quiet ones when there are any, else all of them (and it is disturbed)."""
    windows = {name: (start, end) for name, start, end, _ in state.launch_windows()}
    units: list[dict[str, Any]] = [{"launch": name} for name in state.launch_names()]
    for unit in units:
        window = windows.get(unit["launch"])
        judged = (validity.window_validity(records, window[0], window[1], unit["launch"], info, rank_pids)
                  if window else None)
        unit["disturbed"] = bool(judged and judged.get("disturbed"))
        unit["reasons"] = list(judged.get("reasons") or []) if judged and judged.get("disturbed") else []
        unit["gpu_state"] = (judged or {}).get("gpu_state")
    # the GPUs' state in each launch's window beside the others': a launch off the node's steady state is flagged
    unsteady = validity.unsteady_launches({u["launch"]: u["gpu_state"] for u in units if u["gpu_state"]})
    for unit in units:
        unit["unsteady"] = unsteady.get(unit["launch"], [])
    quiet = [u for u in units if not u["disturbed"]]
    for unit in units:
        unit["used"] = (not unit["disturbed"]) if quiet else True
    return units


def measured_window(state: Any, status: str, launches: list[dict[str, Any]],
                    last_t: float) -> tuple[float, float] | None:
    """The measured steps' wall-clock window (whole configuration when it did not finish); over several
    launches, the last used launch's (each launch is judged on its own by ``judge_launches``)."""
    used = [u["launch"] for u in launches if u.get("used")]
    windows = [(start, end) for name, start, end, _ in state.launch_windows() if name in used]
    if status == Status.OK and windows and len(state.launch_windows()) > 1:
        return windows[-1]  # not a later launch's that was disturbed and left out
    end = state.rank0_end()
    if status == Status.OK and end.get("measure_s") is not None:
        return end["t"] - end["measure_s"], end["t"]
    if state.started_t is None:
        return None
    return state.started_t, state.ended_t or last_t


def window_launch(state: Any, window: tuple[float, float]) -> str | None:
    """The launch whose measured window ``window`` is (the last used one's), else the configuration's last."""
    found = [name for name, start, end, _ in state.launch_windows() if (start, end) == window]
    return found[0] if found else state.launch


def judge(state: Any, status: str, records: list[dict[str, Any]], info: dict[str, Any] | None,
          rank_pids: Collection[int], last_t: float) -> Judged:
    """The configuration ``state`` (a ``ConfigState``) with status ``status``, judged over ``records`` (the
    telemetry, oldest first; ``last_t``: when the newest was taken, the end of a window still open)."""
    launches = judge_launches(state, records, info, rank_pids)
    window = measured_window(state, status, launches, last_t)
    if window is None:
        return Judged(launches, None, state.launch, None)
    launch = window_launch(state, window)
    return Judged(launches, window, launch,
                  validity.window_validity(records, window[0], window[1], launch, info, rank_pids))

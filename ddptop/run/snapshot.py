"""Frozen pictures of a run, the only thing a view reads.

The session is mutated by the thread that reads the run directory (and by the sweep thread through
``Session.mark``); a view that iterated its dicts while that happened could crash or show a half-applied
event. So ``Session.snapshot()`` copies what views need under the session's lock into these frozen
dataclasses, and a ``RunControl`` (``ddptop.control``) adds telemetry, log tails and the live scaling figures
to make a ``RunSnapshot``. Building one reads files, so a frontend builds it off its UI thread and renders
the result; nothing here is shared with the session after it is built.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Mapping

from ddptop.analysis.script_steps import INPUT_BOUND_SHARE
from ddptop.analysis.traces import ConfigTrace
from ddptop.analysis.stats import RankSpread
from ddptop.protocol.config_fields import ConfigFields
from ddptop.protocol.modelspec import with_batch
from ddptop.protocol.wire import ENDED_BY_DDPTOP, ENDED_BY_SCRIPT
from ddptop.records import Estimate
from ddptop.telemetry.host import RankProcess


class RunPhase(StrEnum):
    """Where a whole run stands (``RunSnapshot.phase``): RUNNING and ENDED for the sweep this process runs, the
    others for a run read from its files (watch, view, report). Shown to the user as is."""

    RUNNING = "running"
    ENDED = "ended"  # the ranks are done, the summary may still be being written
    FINISHED = "finished"
    SAVING = "saving"  # ended within watch.SAVE_GRACE, its ddptop not known gone: its summary.json is coming
    WRITER_GONE = "writer gone"
    UNKNOWN = "unknown"  # its ddptop runs on another host: whether it still does cannot be told


FINAL_PHASES = (RunPhase.ENDED, RunPhase.FINISHED, RunPhase.WRITER_GONE)  # nothing more will be measured

CHART_TAIL = 1024  # last step times kept per rank for the chart: it draws at most 2 points per column
EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True)
class StepStats:
    """Pooled step-time percentiles of one configuration so far (seconds), and what they give per second."""

    n: int
    p50: float
    p75: float
    p90: float
    p95: float
    p99: float
    ex_sec_total_p50: float | None  # examples per second over all ranks at the median step
    rank_medians: Mapping[int, float] = field(default_factory=lambda: EMPTY)
    straggler: RankSpread | None = None  # the slowest rank's median over the others', so far

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> "StepStats":
        sec = summary["sec_iter"]
        found = summary.get("straggler")
        return cls(
            n=summary["n"],
            p50=sec["p50"],
            p75=sec["p75"],
            p90=sec["p90"],
            p95=sec["p95"],
            p99=sec["p99"],
            ex_sec_total_p50=summary["ex_sec_total"]["p50"],
            rank_medians=MappingProxyType({int(r): v for r, v in (summary.get("rank_medians") or {}).items()}),
            straggler=RankSpread(rank=found["rank"], ratio=Estimate(value=found["ratio"]), flagged=found["flagged"])
            if found else None,
        )


@dataclass(frozen=True)
class ValiditySoFar:
    """Whether the configuration's measured steps ran on a disturbed node, and why (``report/quiet.py``, the
    summary's rule over the summary's window); ``so_far``: its window has not closed yet (its steps still run,
    or the reading after them is not in), so the summary's verdict may still differ."""

    disturbed: bool
    reasons: tuple[str, ...] = ()
    so_far: bool = False


@dataclass(frozen=True)
class ScriptFigures:
    """A user's training script's configuration (``ddptop run -- train.py``) as its probe saw it so far
    (``ddptop.analysis.script_steps``): what runs, the batch it drew, its data wait, how it ended."""

    command: tuple[str, ...] = ()  # the script and its arguments (config_start's ``command``), as given
    examples_per_step: int | None = None  # the observed global batch: the ranks' median examples a step, summed
    examples_per_rank: int | None = None  # the ranks' median of their median examples a step
    examples_vary: bool = False  # a rank's examples changed from step to step
    tokens_per_step: int | None = None  # where the script gave its tokens (explicit mode)
    ex_per_s: float | None = None  # examples a second over all ranks at the median step (None: not counted)
    tok_per_s: float | None = None
    data_wait: float | None = None  # the ranks' mean share of the step spent waiting for batches (None: not timed)
    rank_data_wait: Mapping[int, float] = field(default_factory=lambda: EMPTY)  # rank -> its share
    starved_rank: int | None = None  # the rank waiting on its data far longer than the others
    ended_by: str | None = None  # config_end's: "ddptop" (its planned steps done) or "script" (it ended itself)
    note: str | None = None  # config_end's: what the probe could not measure
    group_backend: str | None = None  # config_end's: the backend of the script's own process group

    @property
    def data_bound(self) -> bool:
        """Its ranks wait for batches a large share of the step (``script_steps.INPUT_BOUND_SHARE``)."""
        return self.data_wait is not None and self.data_wait >= INPUT_BOUND_SHARE

    def ending(self) -> str | None:
        """How the script's configuration ended, in words, the probe's note after it; None before its end."""
        if self.ended_by is None:
            return None
        words = {ENDED_BY_DDPTOP: "ended by ddptop after its planned steps",
                 ENDED_BY_SCRIPT: "the script ended itself"}.get(self.ended_by, f"ended by {self.ended_by}")
        return f"{words}; {self.note}" if self.note else words

    def command_text(self, width: int | None = None) -> str:
        """The command as a shell would read it, the script by its file name; cut to ``width`` cells with an
        ellipsis (``...`` stays readable in ASCII)."""
        words = list(self.command)
        if words and words[0] != "-m":
            words[0] = words[0].rstrip("/").rsplit("/", 1)[-1]
        text = shlex.join(words)
        if width is not None and len(text) > width:
            text = text[:max(0, width - 3)] + "..."
        return text


@dataclass(frozen=True)
class ConfigSnapshot(ConfigFields):
    """One configuration as a view shows it: what names it (``ConfigFields``), how far it got, its figures."""

    label: str
    backend: str
    status: str
    reason: str | None
    progress: float  # 0..1
    sample_count: int
    revision: int  # changes whenever the configuration's state does
    stats: StepStats | None
    # rank -> its last CHART_TAIL step times, in order
    tails: Mapping[int, tuple[float, ...]] = field(default_factory=lambda: EMPTY)
    unstable: bool = False  # --iters auto stopped on a limit before the median was known to --precision
    # relative half-width of rank 0's median's 95% interval (0.02: +-2%): at its stop, else so far
    precision_reached: float | None = None
    warmup_used: int | None = None  # warm-up steps run (so far, while the configuration runs)
    validity: ValiditySoFar | None = None  # over its measured steps, once they began (while this view watched)
    settled: bool = False  # ddptop has ended it (its runner's mark): the status and reason are final
    started_t: float | None = None  # its first config_start (after its launch set up), its end
    ended_t: float | None = None
    # ended well, and what runs after its steps now: ANALYSIS_TRACE, then ANALYSIS_COMMUNICATION; "" when nothing
    analysis_phase: str = ""
    launches_measured: int = 0  # of its planned launches, those every rank ended well (before its last)
    launches_planned: int = 1
    variant: str = "default"  # the DDP variant it measures (ddptop tune)
    # its profiler trace once a rank reported it (``ddptop.analysis.traces.config_trace``): files and cost, and
    # the breakdown of the files (``ddptop.control`` reads them, outside the session's lock)
    trace: ConfigTrace | None = None
    script: ScriptFigures | None = None  # a user's script's configuration: what its probe saw

    @property
    def analysing(self) -> bool:
        """Its steps ended well; its trace or its communication analysis (no_sync and hooked steps) runs now."""
        return bool(self.analysis_phase)

    @property
    def heading(self) -> str:
        return f"{self.label} {with_batch(self.model, self.batch_size)}"  # a script: its command as typed


ANALYSIS_TRACE, ANALYSIS_COMMUNICATION = "profiler trace", "compute vs communication"  # after the steps, in order


@dataclass(frozen=True)
class LaunchSnapshot:
    name: str
    ended: bool


@dataclass(frozen=True)
class SessionSnapshot:
    run_dir: str
    plan_name: str
    configs: tuple[ConfigSnapshot, ...]
    launches: tuple[LaunchSnapshot, ...]
    ranks: tuple[RankProcess, ...]  # the ranks of launches still running, every host
    started_t: float
    ended_t: float | None
    last_event_t: float | None
    writer: Mapping[str, Any] | None  # the hello of the ddptop process that runs the sweep
    events_applied: int
    measuring: str | None = None  # the configuration whose steps run now (see Session.measuring)

    def running(self) -> ConfigSnapshot | None:
        """The configuration being measured now (with rounds, others stay running between their rounds)."""
        found = next((c for c in self.configs if c.config_id == self.measuring), None)
        return found or next((c for c in self.configs if c.status == "running"), None)

    def current(self) -> ConfigSnapshot | None:
        """The configuration a view follows: the running one, else the last one that measured anything."""
        running = self.running()
        if running is not None:
            return running
        return next((c for c in reversed(self.configs) if c.sample_count), None)

    def analysing(self) -> ConfigSnapshot | None:
        """The configuration whose trace or communication analysis runs now (its steps ended), if any."""
        return next((c for c in self.configs if c.analysing), None)


@dataclass(frozen=True)
class TelemetrySnapshot:
    latest: Mapping[str, Any] | None
    recent: tuple[Mapping[str, Any], ...]  # oldest first, the last HISTORY readings
    info: Mapping[str, Any]
    # a multi-node run's other nodes, by node rank: what each follower's own sampler wrote beside node 0's
    nodes: Mapping[int, "TelemetrySnapshot"] = field(default_factory=lambda: EMPTY)
    # what the ranks used at their peak over every reading so far (ddptop.telemetry.running_peak): cores_busy,
    # rss_bytes, gpu_memory_bytes, each None until read
    peak: Mapping[str, Any] = field(default_factory=lambda: EMPTY)

    HISTORY = 60

    @classmethod
    def of(cls, source: Any) -> "TelemetrySnapshot":
        """Read a Monitor or a TimelineFollower (their records are never changed once appended)."""
        peak = source.peak() if hasattr(source, "peak") else EMPTY
        return cls(source.latest(), tuple(source.recent(cls.HISTORY)), source.info(), peak=peak)


@dataclass(frozen=True)
class ScalingFigures:
    speedup: float
    efficiency: float
    exposed_comm_fraction: float | None
    b_noise: float | None = None  # the gradient noise scale so far, without its interval (the summary has it)


@dataclass(frozen=True)
class RunSnapshot:
    """Everything one frame shows; built off the UI thread by a ``RunControl``."""

    session: SessionSnapshot
    telemetry: TelemetrySnapshot
    scaling: Mapping[str, ScalingFigures] = field(default_factory=lambda: EMPTY)  # config id -> live scaling figures
    logs: tuple[str, ...] | None = None  # None: not read for this frame, keep what is shown
    phase: RunPhase = RunPhase.RUNNING
    who: str | None = None  # who writes a recorded run ("pid 12 on host")
    live: bool = False  # this process runs the sweep
    not_saved: tuple[str, ...] = ()  # run-directory files a full disk stopped, why, in words (kept in memory)
    taken_t: float = field(default_factory=time.time)

    @property
    def going(self) -> bool:
        """More may still be measured: the sweep has not ended, and whoever runs it has not gone."""
        return self.session.ended_t is None and self.phase not in FINAL_PHASES

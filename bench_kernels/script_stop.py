"""When a script's measured steps are done: the same rule on every rank, agreed over the script's own group.

After the warm-up, a fixed count (``--iters``), a time budget's count (agreed: the largest over the ranks),
or ``--iters auto``'s precision rule, looked at between blocks of steps with one small MAX all_reduce over the
script's process group where it holds the launch's ranks, so that every rank ends the same step. Without such a
group the ranks cannot agree: a fixed count, said in a note. ``--script-to-end`` never stops the script.
"""

from __future__ import annotations

import time
from typing import Any

from bench_kernels.probe_steps import StepStream
from bench_kernels.probe_sync import GradSync
from bench_kernels.timing import FIXED, Agree, PrecisionLooks, alone, max_over_group, stop_choice
from ddptop.protocol.launchspec import RunConfig

# --iters auto where the ranks cannot agree between blocks (no process group of the launch's size): a fixed count
FALLBACK_ITERS = 50
SCRIPT_ENDED = "script"  # config_end.stop_reason when the script ended before the planned steps, or ran to its end


class MeasuredSteps:
    """How many of a script's steps are measured, and why they stopped (``stop_reason``)."""

    def __init__(self, torch: Any, cfg: RunConfig, world_size: int, measure: StepStream, notes: list[str],
                 sync: GradSync) -> None:
        self.torch = torch
        self.cfg = cfg
        self.world_size = world_size  # the launch's
        self.measure = measure
        self.notes = notes
        self.sync = sync  # counts the script's own collectives: the rule's all_reduce is left out of them
        self.planned: int | None = None  # measured steps to run (None: the precision rule's looks, or to the end)
        self.looks: PrecisionLooks | None = None
        self.stop_reason = SCRIPT_ENDED

    def begin(self, warmup: list[float]) -> bool:
        """The warm-up (its step times) is over: how many steps to measure. Whether none are."""
        cfg = self.cfg
        if cfg.script_to_end:
            return False
        agree = self._agreement()
        choice = stop_choice(cfg, warmup, None if agree is None else lambda own: int(agree([float(own)])[0]))
        if choice is None:
            self.planned, self.stop_reason = self._unagreed("a time budget's" if cfg.time_budget else "--iters auto's")
        elif choice.rule is not None and agree is not None:
            self.looks = PrecisionLooks(choice.rule, self.measure, agree)
        else:
            self.planned, self.stop_reason = choice.iters, choice.reason
        if self.planned is not None:
            self.measure.total = self.planned
            if self.planned <= 0:
                self.measure.close()
                return True
        return False

    def _unagreed(self, what: str) -> tuple[int, str]:
        self.notes.append(f"{FALLBACK_ITERS} measured steps instead of {what} count: the ranks had no process group "
                          f"of the launch's {self.world_size} ranks to agree on it in")
        return FALLBACK_ITERS, FIXED

    def enough(self, started: float) -> bool:
        """A measured step was recorded (measuring since ``started``): whether they are done."""
        if self.cfg.script_to_end:
            return False
        done = len(self.measure.recorded)
        if self.looks is not None:
            if done < self.looks.done + self.looks.count:
                return False
            reason = self.looks.after_block(time.perf_counter() - started)
            if reason is None:
                return False
            self.stop_reason = reason
        elif self.planned is None or done < self.planned:
            return False
        self.measure.close()
        return True

    def _agreement(self) -> Agree | None:
        """How the ranks agree on when to stop: a MAX all_reduce over the script's process group where it holds
        the launch's ranks, between blocks (every rank ends the same step at the same look); a rank alone by
        itself; None where they cannot."""
        if self.world_size == 1:
            return alone
        torch = self.torch
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != self.world_size:
            return None
        backend = str(dist.get_backend())
        on_cpu = "gloo" in backend or "nccl" not in backend
        device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
        return max_over_group(torch, device, self.sync.own_collective)

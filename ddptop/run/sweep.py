"""Run a plan: one torchrun launch per (world size, backend), all its configurations inside it.

When a launch dies part-way (a rank crashed, ran out of memory, or the user skipped a configuration), the
configuration it was in is ended with the reason and the ones not yet started run in a fresh launch, so one
fault costs one configuration, not the rest of the sweep. A launch that fails before any configuration
begins (bad environment, rendezvous failure) ends the configurations it held instead of retrying forever.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from typing import Any

from ddptop.run import failure_reasons, nccl_debug, rundir, script_tune
from ddptop.run.binding import launch_binding
from ddptop.run.cluster import Cluster
from ddptop.run.follower import END_GRACE
from ddptop.run.hang_watch import STARTUP_GRACE, HangWatch
from ddptop.run.launcher import NodePlacement, TorchrunLaunch, describe_exit
from ddptop.run.plan_records import ConfigSpec, Launch, Plan, rotated
from ddptop.protocol import layout, variants
from ddptop.protocol.launchspec import CollectiveSpec, LaunchSpec, RunConfig
from ddptop.protocol.marks import ConfigEnd, LaunchEnd, LaunchStart, SweepEnd, parse_mark
from ddptop.protocol.vocab import ENDED, FAILED, STOPPED_EXIT, Mode, OnFailure, Status, SweepStatus
from ddptop.protocol import storage
from ddptop.protocol.storage import lasting
from ddptop.protocol.wire import UNWRITABLE_MARK, EventFileReader
from ddptop.run.session import Session
from ddptop.telemetry import timeline, validity
from ddptop.telemetry.inventory import rank_gpu_environment

LOG_TAIL_LINES = 12


# seconds node 0 waits for the other nodes to report the end of a launch (they stop their agent END_GRACE
# after node 0's has ended)
FOLLOWER_END_WAIT = END_GRACE + 15.0


def _identity(path: str) -> tuple[int, int] | None:
    """The directory's device and inode: a directory removed, or removed and made again, reads different."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def repeat_launches(plan: Plan, judged: dict[str, tuple[bool, bool]]) -> list[Launch]:
    """One more launch of each shape whose configurations had a disturbed launch (``judged``: per configuration
    id, whether a launch of its was quiet and whether one was disturbed), where a launch of that shape was quiet.
    A shape is what its launch key names, all that makes a launch's ranks what they are: world size, backend,
    nodes, the CPU part's device, a thread sweep's threads and an NCCL variant's environment; a repeat is that
    launch with the disturbed configurations alone, so it runs as its first launch did."""
    shapes: dict[str, Launch] = {}
    again: dict[str, list[ConfigSpec]] = {}
    quiet: set[str] = set()
    for launch in plan.launches():
        if launch.replicate:
            continue
        shapes.setdefault(launch.launch_key, launch)
        for config in launch.configs:
            was_quiet, was_disturbed = judged.get(config.config_id, (False, False))
            if was_quiet:
                quiet.add(launch.launch_key)
            if was_disturbed:
                again.setdefault(launch.launch_key, []).append(replace(config, round=config.rounds))
    found = [replace(shapes[key], configs=tuple(configs), replicate=configs[0].round)
             for key, configs in again.items() if key in quiet]
    return one_config_a_launch(plan, found)


def one_config_a_launch(plan: Plan, launches: list[Launch]) -> list[Launch]:
    """``launches`` as they run: a script's split into one launch a configuration (the script runs once in a
    launch; a thread try's at its own threads), a kernel's as they are."""
    if not any(config.kind.own_program for launch in launches for config in launch.configs):
        return launches
    return [replace(launch, configs=(config,), threads=config.threads or launch.threads)
            for launch in launches for config in launch.configs]


def ceiling_launches(plan: Plan) -> dict[str, tuple[str, int]]:
    """The launch that measures each device's matmul ceilings, once per sweep: the device's first launch, or on
    the CPU the first with one rank and the most threads (a thread sweep's or the CPU part's), since on the CPU
    the ceiling is the node's, which every rank's FLOP/s together are held against."""
    chosen: dict[str, Launch] = {}
    for launch in plan.launches():
        device = launch.device or plan.device
        best = chosen.get(device)
        if best is None or (device == "cpu" and (launch.world_size == 1, plan.threads_for(launch.world_size,
                                                                                          launch.threads))
                            > (best.world_size == 1, plan.threads_for(best.world_size, best.threads))):
            chosen[device] = launch
    return {device: (launch.launch_key, launch.replicate) for device, launch in chosen.items()}


class SweepRunner:
    def __init__(
        self,
        plan: Plan,
        session: Session,
        poll_interval: float = 0.1,
        stop_grace: float = 5.0,
        flush_interval: float = 0.1,
        cluster: Cluster | None = None,
    ) -> None:
        self.plan = plan
        self.session = session
        self.cluster = cluster  # set when launches may span nodes; this runner is node 0
        # refuse now, in one line, what the ranks could not run (loopback nodes sharing GPUs)
        rank_gpu_environment(plan, dict(os.environ), loopback=bool(cluster and cluster.loopback))
        self.poll_interval = poll_interval
        self.stop_grace = stop_grace
        self.flush_interval = flush_interval
        self.current: TorchrunLaunch | None = None
        self.status = SweepStatus.PENDING
        self._stop = threading.Event()
        self._skip = threading.Event()
        self._launch_index = 0
        # device -> (launch key, replicate) of the launch that measures its matmul ceilings
        self._ceiling_launches = ceiling_launches(plan)
        self.stop_reason = "sweep stopped"
        self.storage_stop: str | None = None  # the run directory went away or read-only: why the sweep stopped
        self._run_dir_id = _identity(session.run_dir)
        self.dropped: dict[str, str] = {}  # ddptop tune: variants dropped as slower than the default, and why
        self._started = time.monotonic()  # the search budget counts from here (ddptop tune)
        self._launch_walls: list[float] = []  # each launch's seconds, to tell whether the next fits the budget

    # -- commands from frontends (any thread) ---------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def request_skip(self) -> None:
        self._skip.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- the sweep ----------------------------------------------------------------------------------------
    def run(self) -> str:
        self.status = SweepStatus.RUNNING
        self._started = time.monotonic()
        # a script's tune runs the script as written once, then the tries that run calls for
        planned = (self._first_run, self._script_tries) if self.plan.script_tune else (self.plan.launches,)
        try:
            for launches in (*planned, self._repeats_of_disturbed, self._combination_launches):
                for launch in launches():
                    if self._stop.is_set():
                        break
                    # of the plan's launches, a configuration already ended (out of memory in an earlier launch
                    # of a batch sweep, or not run after one) is not launched again: it would end the group again
                    launch = replace(launch, configs=tuple(
                        c for c in launch.configs if c.config_id not in self.dropped
                        and not (launches in planned and c.round > 0
                                 and self.session.configs[c.config_id].status in ENDED)))
                    if not launch.configs:
                        continue
                    if self._over_budget(launch):
                        self._end_for_budget(launch)
                        continue
                    started = time.monotonic()
                    try:
                        self._run_launch(launch)
                    except OSError as exc:  # a launch's own files (its directory, launch.json) cannot be written
                        self._stop_for_storage(storage.describe_os_error(exc, exc.filename or self.session.run_dir))
                        break
                    self._launch_walls.append(time.monotonic() - started)
                    if len(self.plan.variants) > 1 and launch.replicate >= 1 and not self.plan.keep_slower:
                        self._drop_slower_variants(launch)
        finally:
            if self.current is not None:  # an exception mid-launch: leave no process behind
                self.current.stop(self.stop_grace)
            for state in self.session.ordered_states():
                if state.status not in ENDED:
                    self._mark(ConfigEnd(state.spec.config_id, Status.NOT_RUN, self.stop_reason))
            self.status = SweepStatus.STOPPED if self._stop.is_set() else SweepStatus.DONE
            self._mark(SweepEnd(self.status))
        return self.status

    def _run_launch(self, launch: Launch) -> None:
        self._launch_index += 1
        remaining = list(launch.configs)
        attempt = 0
        while remaining and not self._stop.is_set():
            path = rundir.launch_dir(self.session.run_dir, self._launch_index, launch.launch_key, attempt)
            name = os.path.basename(path)
            threads = self.plan.threads_for(launch.world_size, launch.threads)
            device = launch.device or self.plan.device
            # the collective benchmark once per world size, in its last launch (not again in each repeat)
            last = launch.replicate == max(1, self.plan.launches_per_config) - 1
            collectives = (self.plan.collective_spec()
                           if launch.world_size > 1 and last and self.plan.measures_collectives(launch) else None)
            spec = LaunchSpec(
                launch_id=name,
                events_dir=layout.events_dir(path),
                device=device,
                backend=launch.backend,
                threads_per_rank=threads,
                flush_interval=self.flush_interval,
                memory_cap_mb=self.plan.memory_cap_mb,
                inject=tuple(self.plan.inject),
                collectives=CollectiveSpec.from_json(collectives) if collectives else None,
                measure_ceiling=self._ceiling_launches.get(device) == (launch.launch_key, launch.replicate)
                and attempt == 0,
                run_dir=self.session.run_dir,
                script=self.plan.script,
                script_dir=self.plan.script_dir,
                # rank_cores/binding/numa_binding
                **launch_binding(self.plan, launch.nproc_per_node, self.plan.bound_cores(launch.world_size, threads),
                                 device),
                configs=tuple(RunConfig.from_json(c.to_json()) for c in remaining),
            )
            env = {"OMP_NUM_THREADS": str(threads),
                   **rank_gpu_environment(self.plan, dict(os.environ), loopback=bool(self.cluster and self.cluster.loopback)),
                   **dict(launch.env)}  # an NCCL variant's (ddptop tune)
            if device != self.plan.device:  # the CPU part of a plan on GPUs: its ranks see no GPU at all
                env["CUDA_VISIBLE_DEVICES"] = ""
            if len(self.plan.variants) > 1 and launch.backend == "nccl":  # a tune: which algorithm NCCL used
                env.update(nccl_debug.tuning_environment(path, os.environ))
            placement = self._placement(launch.nodes)
            self._mark(LaunchStart(name, launch.world_size, launch.backend, tuple(c.config_id for c in remaining),
                                   nodes=launch.nodes, nproc_per_node=launch.nproc_per_node))
            torchrun = TorchrunLaunch(path, spec, launch.nproc_per_node, env, placement=placement)
            startup = max(STARTUP_GRACE, placement.join_timeout) if placement else STARTUP_GRACE
            ended_by, ended_config, hang_reason = self._supervise(torchrun, path, startup)
            outcome = torchrun.outcome()
            self.current = None
            if placement is not None:
                self._wait_for_followers(name, launch.nodes)
            self.session.refresh(final=True)
            unwritable = self._unwritable_events(path) if outcome.status == Status.FAILED else None
            if unwritable and lasting(unwritable.partition(": ")[2] or unwritable):
                self._stop_for_storage(unwritable)  # read-only or gone: every later launch would fail alike

            for config in remaining:
                state = self.session.configs[config.config_id]
                # a script that ended before its first step here measured nothing: failed, in its own words
                early = (self._ended_early(state, name, path, outcome.exit_code) if config.kind.own_program
                         else None)
                if early is None and state.status == Status.RUNNING and state.ended_round(config.round):
                    continue  # its round in this launch is measured; a later launch measures it again
                if early is not None:
                    status, reason = Status.FAILED, early
                elif state.status == Status.RUNNING:
                    if ended_by == "skip" and ended_config == config.config_id:
                        status, reason = Status.SKIPPED, "skipped by the user"
                    elif ended_by == "hang" and ended_config == config.config_id:
                        status, reason = Status.FAILED, hang_reason
                    elif self.storage_stop is not None:
                        status, reason = Status.FAILED, self.storage_stop
                    elif self._stop.is_set():
                        status, reason = Status.STOPPED, "stopped by the user"
                    else:
                        status, reason = Status.FAILED, unwritable or state.reason or outcome.reason
                elif state.status in FAILED and not state.log_tail:
                    status, reason = state.status, state.reason  # a rank reported it; add what its log says
                else:
                    continue
                # unless the launch ended well: it went on past a configuration its ranks ended (the memory cap
                # refused it before any step), so its log's end is about the ones after it, and no rank died
                went_on = state.status in FAILED and outcome.status != Status.FAILED
                failed_here = status in FAILED and not went_on
                if unwritable and status == Status.FAILED:  # said in the reason, or the peers' errors echo it
                    cause = unwritable if state.status in FAILED else None
                else:
                    cause = self._silent_death(path, state) if failed_here else None
                # a script's rank that ended by itself while the others went on: said first, whatever ended them
                apart = (failure_reasons.script_ended_apart(state.end)
                         if config.kind.own_program and status in FAILED and early is None else None)
                if apart is not None:
                    cause = failure_reasons.cause_in_front(apart, cause)
                # the script's own output where it ended first: its reason for ending is as likely in stdout
                tail = tuple(self._log_tail(path, ("stdout", "stderr") if early else ("stderr",))) if failed_here else None
                self._mark(ConfigEnd(config.config_id, status, reason, cause=cause, log_tail=tail))
            self._mark(LaunchEnd(name, outcome.exit_code, outcome.status, outcome.reason, outcome.wall_s))
            if self.plan.batch_sweep:
                self._skip_past_oom(remaining)
            if self.plan.on_failure == OnFailure.STOP and any(
                self.session.configs[c.config_id].status == Status.FAILED for c in remaining
            ):
                self.stop_reason = "sweep stopped after a failed configuration (--on-failure stop)"
                self._stop.set()
            before = len(remaining)
            remaining = [c for c in remaining if self.session.configs[c.config_id].status not in ENDED
                         and not self.session.configs[c.config_id].ended_round(c.round)]
            hung_early = ended_by == "hang" and ended_config is None
            if remaining and (outcome.status == Status.FAILED or hung_early) and len(remaining) == before:
                cause = hang_reason if hung_early else (unwritable or outcome.reason)
                reason = f"launch failed before any configuration ran: {cause}"
                tail = tuple(self._log_tail(path))
                for config in remaining:
                    self._mark(ConfigEnd(config.config_id, Status.FAILED, reason, log_tail=tail))
                remaining = []
            attempt += 1

    def _units(self, configs: list[ConfigSpec]) -> dict[str, dict[str, dict[int, list[float]]]]:
        """Each configuration's steps so far, by launch and rank (the unit of ``analysis.tuning.standing``)."""
        from ddptop.analysis import launches as launch_model  # numpy: only a tune's runner needs it

        units = {}
        for config in configs:
            state = self.session.configs[config.config_id]
            with self.session.lock:
                samples = {rank: list(values) for rank, values in state.samples.items() if values}
                labels = state.launches_of_steps()
            units[config.config_id] = launch_model.split_by_launch(samples, labels)
        return units

    def _expected_launch_s(self) -> float:
        return sum(self._launch_walls) / len(self._launch_walls) if self._launch_walls else 0.0

    def _over_budget(self, launch: Launch) -> bool:
        """ddptop tune's --search-budget: this launch would end past it, and every configuration in it has two
        launches already (the fewest that give an interval its launch-to-launch level)."""
        budget = self.plan.search_budget
        if not budget or time.monotonic() - self._started + self._expected_launch_s() <= budget:
            return False
        return all(self.session.configs[c.config_id].ended_round(1) for c in launch.configs)

    def _end_for_budget(self, launch: Launch) -> None:
        """End the launch's configurations as measured so far: ok, their steps kept, the reason saying so."""
        for config in launch.configs:
            state = self.session.configs[config.config_id]
            if state.status in ENDED:
                continue
            done = len(state.launch_names())
            self._mark(ConfigEnd(config.config_id, Status.OK,
                                 f"search budget ({self.plan.search_budget:g} s) spent after {done} of "
                                 f"{state.spec.rounds} launches"))

    def _variant_group(self, launch: Launch) -> list[ConfigSpec]:
        """The DDP configurations measured against one default: the launch's model, batch, world size and
        backend, in every launch (an NCCL variant runs in a launch of its own), not dropped; DDP as written
        measured again stands for the default in the combination's launches."""
        again = any(c.variant == variants.AGAIN for c in launch.configs)
        return [c for c in self.plan.configs() if c.mode == Mode.DDP and c.config_id not in self.dropped
                and (c.world_size, c.backend) == (launch.world_size, launch.backend)
                and any((c.model, c.batch_size) == (o.model, o.batch_size) for o in launch.configs)
                and ((c.variant == variants.AGAIN or variants.JOIN in c.variant) == again)
                # ZeRO-1 and FSDP2 beside a sweep (--strategies) are not tune's candidates (variants) to drop
                and (c.strategy == "ddp" or c.variant != variants.DEFAULT)]

    def _first_run(self) -> list[Launch]:
        """A script's tune: the script as written, its first launch alone."""
        return self.plan.launches()[:1]

    def _script_tries(self) -> list[Launch]:
        """A script's tune after its first run: the tries it calls for added to the plan, and the plan's launches
        after the first; none where the script as written failed or nothing calls for a try (the script as
        written then ends with the one launch it had, and the summary says why)."""
        default = next(s for s in self.session.ordered_states() if variants.as_written(s.spec.variant))
        if self._stop.is_set():
            return []
        with self.session.lock:  # its steps and script figures, as the view reads them
            found = script_tune.add_tries(self.plan, default)
        self.plan = found.plan
        self.session.add_configs(found.plan, found.added)
        if found.nothing is not None:
            if default.status not in ENDED:
                self._mark(ConfigEnd(default.spec.config_id, Status.OK, f"no try: {found.nothing}"))
            return []
        return one_config_a_launch(self.plan, self.plan.launches())[1:]

    def _combination_launches(self) -> list[Launch]:
        """ddptop tune's last step: where two variants or more were faster than DDP as written beyond noise,
        the best of them that can be set together (``variants.combinable``), measured against DDP as written
        once more, both new configurations in fresh launches of their own, interleaved as the plan does.
        The plan (and plan.json) gains the two, so a rebuild from the files finds them."""
        from ddptop.analysis import tuning, uncertainty  # numpy: only a tune's runner needs it

        if len(self.plan.variants) < 2 or self._stop.is_set() or variants.AGAIN in self.plan.variants:
            return []
        rounds = max(1, self.plan.launches_per_config)
        budget = self.plan.search_budget
        if budget and time.monotonic() - self._started + rounds * self._expected_launch_s() > budget:
            return []  # no room for the combination's launches: the faster ones stay measured alone
        found: list[Launch] = []
        for launch in self.plan.launches():
            if launch.replicate:
                continue
            ddp = self._variant_group(launch)
            default = next((c for c in ddp if c.variant == variants.DEFAULT), None)
            if default is None or default not in launch.configs:  # each group once, from its default's launch
                continue
            names = {c.config_id: c.variant for c in ddp}
            faster = sorted(((ratio.value, names[config_id]) for config_id, (verdict, ratio)
                             in tuning.standing(self._units(ddp), default.config_id).items()
                             if verdict == uncertainty.FASTER))
            chosen = variants.combinable([name for _, name in faster])
            if len(chosen) < 2:
                continue
            combination = variants.JOIN.join(chosen)
            self.plan = replace(self.plan, variants=(*self.plan.variants, variants.AGAIN, combination))
            new = [c for c in self.plan.configs() if c.variant in (variants.AGAIN, combination)
                   and (c.world_size, c.backend, c.batch_size, c.model) ==
                   (default.world_size, default.backend, default.batch_size, default.model)]
            self.session.add_configs(self.plan, new)
            for replicate in range(max(1, self.plan.launches_per_config)):
                found.append(replace(launch, replicate=replicate, configs=tuple(
                    replace(c, round=replicate) for c in rotated(new, replicate))))
        return one_config_a_launch(self.plan, found)

    def _drop_slower_variants(self, launch: Launch) -> None:
        """ddptop tune's successive halving: after a configuration's second launch or later, a variant that is
        already slower than DDP as written beyond noise (``analysis.tuning.slower_so_far``) gets no further
        launch; it ends ok, its steps kept, and the reason says after how many launches it was dropped."""
        from ddptop.analysis import tuning  # numpy: only a tune's runner needs it

        group = self._variant_group(launch)
        default = next((c for c in group if variants.as_written(c.variant)), None)
        if default is None:
            return
        units = self._units(group)
        for config_id, ratio in tuning.slower_so_far(units, default.config_id).items():
            state = self.session.configs[config_id]
            if state.status in ENDED:
                continue
            done = len(units[config_id])
            self.dropped[config_id] = (f"dropped after {done} of {state.spec.rounds} launches: slower than DDP as "
                                       f"written beyond noise (step time {ratio.value:.2f}x, "
                                       f"{ratio.low:.2f}-{ratio.high:.2f})")
            self._mark(ConfigEnd(config_id, Status.OK, self.dropped[config_id]))

    def _repeats_of_disturbed(self) -> list[Launch]:
        """One more launch for each configuration that ended well but had a launch measured while the node was
        disturbed (another process's load, throttling: ``telemetry.validity``), so that its figures can come
        from quiet launches; the summary says which launches it used and why (``report.build``). None for
        a launch of a shape (``repeat_launches``) none of whose launches was quiet: on a node busy
        throughout (a neighbour's job on the cores a launch leaves free), a further launch of that shape would be
        disturbed too, and the figures say they come from disturbed launches."""
        records, _ = timeline.read_timeline(os.path.join(self.session.run_dir, layout.TIMELINE_FILE))
        if not records:
            return []
        info = timeline.timeline_info(records)
        rank_pids = self.session.rank_pids()
        judged: dict[str, tuple[bool, bool]] = {}  # config id -> (a launch of its quiet, one disturbed)
        for state in self.session.configs.values():
            if state.status != Status.OK:
                continue
            found = [validity.window_validity(records, start, end, name, info, rank_pids)
                     for name, start, end, _ in state.launch_windows()]
            judged[state.spec.config_id] = (any(j["readings"] and not j["disturbed"] for j in found),
                                            any(j["disturbed"] for j in found))
        return repeat_launches(self.plan, judged)

    def _skip_past_oom(self, configs: list) -> None:
        """Batch sweep: once a batch ran out of memory, larger batches of the same kind cannot fit either."""
        for oom in configs:
            if self.session.configs[oom.config_id].status != Status.OOM:
                continue
            for config in configs:
                if config.cannot_fit_after(oom):
                    if self.session.configs[config.config_id].status not in ENDED:
                        self._mark(ConfigEnd(config.config_id, Status.NOT_RUN,
                                             f"batch {oom.batch_size} already ran out of memory"))

    def _wait_for_followers(self, launch: str, nodes: int) -> None:
        """Let the other nodes' agents end before going on: the next launch must not meet one still running,
        and the summary should hold every node's report of this one."""
        readers = {k: EventFileReader(layout.run_file(self.session.run_dir, layout.RUNNER_FILE, k))
                   for k in range(1, nodes)}
        deadline = time.monotonic() + FOLLOWER_END_WAIT
        while readers and time.monotonic() < deadline:
            for node, reader in list(readers.items()):
                marks = map(parse_mark, reader.read_new())
                if any(isinstance(m, LaunchEnd) and m.launch == launch for m in marks):
                    del readers[node]
            time.sleep(self.poll_interval)

    def _placement(self, nodes: int) -> NodePlacement | None:
        if nodes <= 1:
            return None
        if self.cluster is None:
            raise RuntimeError(f"a launch on {nodes} nodes needs the rendezvous settings (--rdzv-endpoint, --slurm)")
        return NodePlacement.on(self.cluster, nodes)

    def _supervise(
        self, torchrun: TorchrunLaunch, path: str, startup: float = STARTUP_GRACE
    ) -> tuple[str | None, str | None, str | None]:
        """Wait for the launch while honouring stop and skip and watching for a hang.

        Returns what ended it early: ("skip", config id, None), ("hang", config id, reason) or (None, ...).
        """
        self.current = torchrun
        torchrun.start()
        ended: tuple[str | None, str | None, str | None] = (None, None, None)
        watch = HangWatch(layout.events_dir(path), self.plan.hang_timeout, startup)
        while torchrun.poll() is None:
            if self._stop.is_set():
                torchrun.stop(self.stop_grace)
                break
            if self._skip.is_set():
                self._skip.clear()
                running = self._running_config()
                if running is not None:
                    ended = ("skip", running, None)
                    torchrun.stop(self.stop_grace)
                    break
            problem = self._run_dir_problem()
            if problem is not None:
                self._stop_for_storage(problem)
                torchrun.stop(self.stop_grace)
                break
            silent = watch.silent_for()
            if silent is not None:
                running = self._running_config()
                ended = ("hang", running, watch.reason(silent, self._script_without_step(running)))
                torchrun.stop(self.stop_grace)
                break
            time.sleep(self.poll_interval)
        torchrun.kill_tree()  # ranks can outlive a dead agent; make sure none does
        return ended

    def _script_without_step(self, config_id: str | None) -> bool:
        """Whether the running configuration is a script no rank has ended a training step of in this launch
        (a script's first step is always a warm-up step, counted again in each launch's round): the hang's
        reason then says how ddptop tells a script's step."""
        if config_id is None:
            return False
        state = self.session.configs[config_id]
        if not state.spec.kind.own_program:
            return False
        with self.session.lock:
            return not any(state.warmup_seen.values())

    def _run_dir_problem(self) -> str | None:
        """Why the run directory can no longer be written (removed, replaced or made read-only), or None:
        two system calls, cheap enough for every poll."""
        if _identity(self.session.run_dir) != self._run_dir_id:
            return f"the run directory {self.session.run_dir} was removed"
        if not os.access(self.session.run_dir, os.W_OK):
            return f"the run directory {self.session.run_dir} became read-only"
        return None

    def _stop_for_storage(self, problem: str) -> None:
        self.storage_stop = f"sweep stopped: {problem}"
        self.stop_reason = self.storage_stop
        self._stop.set()

    def _ended_early(self, state: Any, launch: str, path: str, exit_code: int | None) -> str | None:
        """Why a script's configuration fails where it ended before its first measured step in ``launch``
        (``failure_reasons.script_ended_early``); None where it did not, or where it failed already."""
        if state.status != Status.RUNNING:
            return None
        ends = state.ends_in(launch)
        if not any(failure_reasons.measured_nothing(end) for end in ends.values()):
            return None
        return failure_reasons.script_ended_early(ends, state.spec.processes, exit_code, rundir.last_output(path))

    @staticmethod
    def _unwritable_events(path: str) -> str | None:
        """Why a rank could not write its events: its own last words (``UNWRITABLE_MARK`` on its stderr),
        else a probe of the events directory (a real full disk takes the ranks' logs with it)."""
        for _, logs_dir in rundir.node_log_dirs(path):
            for _, streams in sorted(rundir.worker_logs(path, logs_dir).items()):
                for line in rundir.tail_lines(streams.get("stderr", ""), LOG_TAIL_LINES):
                    if UNWRITABLE_MARK in line:
                        return line.split(UNWRITABLE_MARK, 1)[1].strip()
        return storage.storage_problem(layout.events_dir(path))

    def _mark(self, mark: ConfigEnd | LaunchEnd | LaunchStart | SweepEnd) -> None:
        self.session.mark(**mark.to_data())

    def _running_config(self) -> str | None:
        self.session.refresh()
        return self.session.measuring()

    @staticmethod
    def _silent_death(path: str, state: Any) -> str | None:
        """A rank that died without reporting (SIGKILL, os._exit) is the cause; the others' errors are echoes.
        Of the failures torchrun lists, the first that reported nothing: its root cause, else one stamped in
        the same second (a tie torchrun broke toward the lower rank). A later one, or one ended by SIGTERM
        (exit -15, or 143 from the kernel's handler), is torchrun stopping the rest after the cause."""
        reported = {e["rank"] for e in state.errors}
        failures = rundir.failed_ranks(path)
        silent = [(rank, code) for at, (rank, code, when) in enumerate(failures)
                  if rank not in reported
                  and (at == 0 or (when == failures[0][2] and code not in (-signal.SIGTERM, STOPPED_EXIT)))]
        return f"rank {silent[0][0]} {describe_exit(silent[0][1])}" if silent else None

    @staticmethod
    def _log_tail(path: str, streams: tuple[str, ...] = ("stderr",)) -> list[str]:
        return rundir.log_tail(path, LOG_TAIL_LINES, streams)

"""A straggler in lockstep: DDP's allreduce makes every rank's step as long as the slowest rank's, so the step
times cannot name it; each rank's compute alone (no_sync) and its wait in the allreduce can. The detection on
simulated ranks, the report's words, the ``slow`` fault's spec and timing, and one real gloo run."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from bench_kernels import faults
from bench_kernels.faults import FaultSpecError, Slowdown, parse_fault
from ddptop.analysis import intervals, stats, stragglers
from ddptop.report import communication_tables, sections
from ddptop.report.schema import Estimate, Summary
from tests.conftest import run_sweep, tiny_config


def _lockstep(factors: dict[int, float], steps: int = 40, seed: int = 1) -> tuple[SimpleNamespace, dict]:
    """Ranks computing ``factors[r]`` times a 10 ms step (with noise), synchronised by an allreduce of 2 ms
    at the end of each step: what a session holds of their measured, no_sync and hooked steps."""
    rng = random.Random(seed)
    samples, nosync, waits = {}, {}, {}
    computes = [{r: 0.010 * f * rng.lognormvariate(0, 0.05) for r, f in factors.items()} for _ in range(steps)]
    for rank in factors:
        samples[rank] = [max(c.values()) + 0.002 + rng.gauss(0, 1e-5) for c in computes]
        nosync[rank] = [c[rank] for c in computes]
        waits[rank] = [max(c.values()) - c[rank] + 0.002 for c in computes]  # handed over, then waits
    medians = {rank: stats.median(values) for rank, values in samples.items()}
    entry = {
        "config_id": "m/ddp/bs8/n%d/gloo" % len(factors),
        "world_size": len(factors),
        "stats": {"straggler": stats.straggler(medians)},
        "communication": {"buckets": {"hooked_step_s": stats.median([v for s in samples.values() for v in s])}},
    }
    intervals._straggler(entry["stats"], samples, entry["config_id"])
    state = SimpleNamespace(nosync=nosync, comm={r: {"bucket_comm_s": w} for r, w in waits.items()})
    return state, entry


@pytest.mark.parametrize("factors, slow", [({0: 1.0, 1: 3.0}, 1), ({0: 1.0, 1: 1.0, 2: 1.3, 3: 1.0}, 2),
                                           ({0: 2.0, 1: 1.0}, 0)])
def test_a_slow_rank_in_lockstep_is_named_by_its_compute_and_the_others_wait(factors, slow):
    state, entry = _lockstep(factors)
    found = stragglers.config_straggler(state, entry)
    assert not found["step_time"]["flagged"]  # the step times are alike: they cannot name it
    assert found["rank"] == slow and found["evidence"] == f"{stragglers.COMPUTE} and {stragglers.WAIT}"
    low, high = found["ratio"].ci
    assert low >= stats.STRAGGLER_RATIO and low <= found["ratio"].value <= high
    assert low <= max(factors.values()) <= high
    wait = found["allreduce_wait"]
    assert wait["flagged"] and wait["rank"] == slow
    assert wait["others_wait_s"].low <= wait["others_wait_s"].value <= wait["others_wait_s"].high


def test_balanced_ranks_name_no_straggler():
    state, entry = _lockstep({0: 1.0, 1: 1.0, 2: 1.0})
    found = stragglers.config_straggler(state, entry)
    assert found["rank"] is None and found["evidence"] is None
    assert not found["compute"]["flagged"] and not found["allreduce_wait"]["flagged"]
    assert found["compute"]["ratio"].low < stats.STRAGGLER_RATIO  # the slowest by chance, inside the noise


def test_a_difference_inside_the_noise_names_no_straggler():
    rng = random.Random(7)
    noisy = {0: [0.010 * rng.lognormvariate(0, 0.4) for _ in range(12)],
             1: [0.0112 * rng.lognormvariate(0, 0.4) for _ in range(12)]}
    found = stragglers.compute_evidence(noisy, seed=3)
    assert found["ratio"].value >= stats.STRAGGLER_RATIO  # the medians alone would name a rank
    assert not found["flagged"] and found["ratio"].low < stats.STRAGGLER_RATIO


def test_too_few_steps_name_no_rank_however_far_apart():
    few = {0: [0.001] * (stragglers.MIN_STEPS - 1), 1: [0.003] * (stragglers.MIN_STEPS - 1)}
    compute = stragglers.compute_evidence(few)
    wait = stragglers.wait_evidence(few, step_s=0.004)
    assert compute["rank"] == 1 and not compute["flagged"] and compute["too_few_steps"]
    assert wait["rank"] == 0 and not wait["flagged"] and wait["too_few_steps"]
    assert stragglers.name_straggler(compute, wait, None)["rank"] is None


def test_a_rank_is_named_only_where_both_measurements_name_it():
    """The no_sync steps and the hooked steps are taken at different times: one alone may have met a passing
    load. Where both were measured both must name the rank; the step times count only without them."""
    compute = {"rank": 1, "ratio": Estimate(value=2.0, ci=[1.8, 2.2]), "flagged": True}
    wait = {"rank": 1, "others_wait_s": Estimate(value=0.01, ci=[0.008, 0.012]), "flagged": True}
    step_time = {"rank": 3, "ratio": Estimate(value=1.2, ci=[1.1, 1.3]), "flagged": True}
    named = stragglers.name_straggler(compute, wait, step_time)
    assert (named["rank"], named["ratio"].ci, named["others_wait_s"].ci) == (1, [1.8, 2.2], [0.008, 0.012])
    assert named["evidence"] == f"{stragglers.COMPUTE} and {stragglers.WAIT}"
    alone = stragglers.name_straggler(compute, dict(wait, flagged=False), step_time)
    assert alone["rank"] is None and alone["unconfirmed"] == [{"rank": 1, "evidence": stragglers.COMPUTE}]
    apart = stragglers.name_straggler(compute, dict(wait, rank=0), step_time)
    assert apart["rank"] is None and [u["rank"] for u in apart["unconfirmed"]] == [1, 0]
    only_wait = stragglers.name_straggler(None, wait, step_time)
    assert (only_wait["rank"], only_wait["evidence"]) == (1, stragglers.WAIT)
    without_analysis = stragglers.name_straggler(None, None, step_time)
    assert (without_analysis["rank"], without_analysis["evidence"], without_analysis["ratio"].ci) == (
        3, stragglers.STEP_TIME, [1.1, 1.3])
    assert stragglers.name_straggler(None, None, dict(step_time, flagged=False))["rank"] is None


def test_one_rank_or_no_steps_has_no_straggler():
    state, entry = _lockstep({0: 1.0, 1: 3.0})
    assert stragglers.config_straggler(state, dict(entry, world_size=1)) is None
    assert stragglers.config_straggler(state, dict(entry, stats=None)) is None
    without_analysis = SimpleNamespace(nosync={}, comm={})  # --comm-iters 0
    found = stragglers.config_straggler(without_analysis, entry)
    assert found["compute"] is None and found["allreduce_wait"] is None and found["rank"] is None


def test_a_damaged_comm_event_is_read_around():
    state, entry = _lockstep({0: 1.0, 1: 3.0})
    state.comm = {0: {"bucket_comm_s": "garbage"}, 1: {"bucket_comm_s": [None, "x", True, float("nan")]}, 2: {}}
    found = stragglers.config_straggler(state, entry)
    assert found["allreduce_wait"] is None  # nothing readable: left out
    assert (found["rank"], found["evidence"]) == (1, stragglers.COMPUTE)  # the compute alone names it


def _summary(*entries):
    return Summary.from_json({"configs": list(entries)})


def test_the_report_names_the_straggler_with_its_intervals():
    state, entry = _lockstep({0: 1.0, 1: 3.0})
    entry["straggler"] = stragglers.config_straggler(state, entry)
    text = sections.text_of("stragglers", _summary(entry))
    assert f"{entry['config_id']}: rank 1 is the straggler (no_sync compute and allreduce wait)" in text
    compute = entry["straggler"]["compute"]
    shown = communication_tables._times(compute["ratio"])
    assert f"rank 1 {shown} the other ranks'" in text and "(" in shown
    assert "a step longer than rank 1" in text
    assert "alike: DDP keeps the ranks in step" in text
    markdown = "\n".join(sections.markdown_of("stragglers", _summary(entry)))
    assert f"- `{entry['config_id']}`: rank 1 is the straggler" in markdown

    balanced_state, balanced = _lockstep({0: 1.0, 1: 1.0})
    balanced["straggler"] = stragglers.config_straggler(balanced_state, balanced)
    assert "no straggler beyond noise" in sections.text_of("stragglers", _summary(balanced))
    assert "is the straggler" not in sections.text_of("stragglers", _summary(balanced))

    # a passing load in the no_sync steps alone: rank 0 slower there, its peers never waiting for it
    passing = SimpleNamespace(nosync=dict(balanced_state.nosync), comm=balanced_state.comm)
    passing.nosync[0] = [2 * v for v in passing.nosync[0]]
    balanced["straggler"] = stragglers.config_straggler(passing, balanced)
    text = sections.text_of("stragglers", _summary(balanced))
    assert balanced["straggler"]["rank"] is None and "is the straggler" not in text
    assert ("no straggler named: the no_sync compute points at rank 0, the allreduce wait does not confirm it "
            "beyond noise") in text


def test_the_report_leaves_the_part_out_where_nothing_tells_a_straggler():
    _, entry = _lockstep({0: 1.0, 1: 1.0})
    entry["straggler"] = stragglers.name_straggler(None, None, entry["stats"]["straggler"])
    assert sections.text_of("stragglers", _summary(entry)) == "" and sections.markdown_of("stragglers", _summary(entry)) == []
    assert "stragglers" in sections.BY_KEY


def test_slow_fault_specs_are_checked():
    fault = parse_fault("slow:rank=1:factor=2.5:config=n2")
    assert (fault.kind, fault.rank, fault.factor, fault.config, fault.at_step) == ("slow", 1, 2.5, "n2", False)
    assert parse_fault("crash:rank=1:iter=3").at_step
    for text, words in (("slow:rank=1", "slow needs factor=F"), ("slow:factor=1", "factor must be a number above 1"),
                        ("slow:factor=fast", "factor must be a number above 1"),
                        ("slow:factor=nan", "factor must be a number above 1"),
                        ("slow:factor=2:iter=3", "expected rank=R, factor=F or config=TEXT"),
                        ("crash:factor=2", "expected rank=R, iter=I, config=TEXT or phase=P")):
        with pytest.raises(FaultSpecError, match=words):
            parse_fault(text)


class _Clock:
    """time.perf_counter and time.sleep on a clock that moves a tick at each reading (a busy wait reads it) and
    otherwise only when told: the slowed step's arithmetic without a machine's noise."""

    TICK = 1e-7

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += self.TICK
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_slowed_rank_computes_factor_times_as_long_and_its_wait_stays_as_it_was(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(faults, "time", clock)
    slowdown = Slowdown(3.0)
    compute = [0.010, 0.012, 0.009, 0.010, 0.011]
    tail = 0.004  # the allreduce's last bucket, after the last gradient: no compute to scale

    def step(seconds):
        def run():
            slowdown.before_forward()  # the forward pre-hook, at the start of the model's forward
            clock.now += seconds
            slowdown.gradient_ready()  # the last gradient accumulated
            clock.now += tail
        return run

    took = []
    for seconds in compute:
        start = clock.perf_counter()
        slowdown.timed(step(seconds))()
        took.append(clock.perf_counter() - start)
    assert took[0] == pytest.approx(compute[0] + tail, abs=1e-5)  # nothing to scale by before a first step
    # each later step: its own, plus (factor - 1) times the shortest compute of the steps before (alone)
    assert took[1:] == pytest.approx([compute[i] + tail + 2 * min(compute[:i]) for i in range(1, len(compute))],
                                     abs=1e-5)


def test_the_slowdown_hooks_fire_through_ddp_and_no_sync(one_rank_group):
    """The pause and the compute's stamps are hooks of the bare model: DDP's wrapper, with or without its
    allreduce, runs them (a real gloo group of one rank)."""
    from bench_kernels.training import build_training

    workload = build_training(tiny_config(), one_rank_group.device("cpu"), local_rank=0, rank=0)
    workload.slow_down(3.0)
    slowdown, step = workload.slowdown, workload.step_through(workload.net)
    step()
    assert slowdown.compute_s > 0 and slowdown.ready > slowdown.started
    with workload.net.no_sync():
        step()
    assert len(slowdown.computes) == 2 and slowdown.ready > slowdown.started


@pytest.mark.slow
def test_a_rank_slowed_by_an_injected_fault_is_named_the_straggler(tmp_path):
    """Real ranks in a gloo group under torchrun: rank 1 computes eight times as long (three times was within
    noise beside a busy process: rank 0's wait for it, 95% CI from below zero); the summary and the report name
    it, from its compute timed alone and from the other rank's wait for it."""
    done = run_sweep(str(tmp_path / "run"), "--models", "tests.tiny_models:tiny_cnn", "--batch-sizes", "32",
                     "--world-sizes", "2", "--image-size", "32", "--num-classes", "10", "--warmup", "2",
                     "--iters", "10", "--comm-iters", "40", "--no-collectives", "--telemetry-interval", "0",
                     "--inject", "slow:rank=1:factor=8", "--launches", "1")
    assert done.returncode == 0, done.stderr + done.stdout
    entry = done.summary()["configs"][0]
    found = entry["straggler"]
    assert (found["rank"], found["evidence"]) == (1, "no_sync compute and allreduce wait"), found
    assert found["ratio"]["ci"][0] >= stats.STRAGGLER_RATIO and found["others_wait_s"]["ci"][0] > 0
    assert f"{entry['config_id']}: rank 1 is the straggler (no_sync compute and allreduce wait)" in done.stdout

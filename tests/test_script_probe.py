"""A user's training script measured by ddptop's probe (``bench_kernels.script_probe``, ``ddptop_probe``).

Quick: how a batch's examples are counted; the probe installed in this process around real training loops (a
DataLoader, SGD, gradient accumulation, two optimizers a step, explicit marks, a batch the counter breaks on),
read back from its events file; ``ddptop_probe`` outside ddptop; the new fields of ``samples``.

Slow (real torchrun launches with gloo): ``examples/train.py`` unchanged at N = 2 and, in explicit mode with
loader workers, at N = 1; a script that raises; a batch the probe cannot read; ``--iters auto`` agreed between
two ranks; SIGTERM. Each reads the rank's events with ``EventFileReader`` and looks for processes left behind.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time

import pytest

from ddptop.protocol import wire
from ddptop.protocol.launchspec import LaunchSpec
from ddptop.protocol.vocab import STOPPED_EXIT
from tests.conftest import REPO, processes_mentioning, tiny_config

torch = pytest.importorskip("torch")

TRAIN = os.path.join(REPO, "examples", "train.py")


def script_config(**changes):
    values = dict(config_id="train/n1", model="script", warmup=2, iters=6, comm_iters=0)
    values.update(changes)
    return tiny_config(**values)


def read_events(path: str) -> list[dict]:
    reader = wire.EventFileReader(path)
    events = reader.read_rest()
    assert reader.malformed == 0, reader.first_problem
    return events


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def steps(events: list[dict], phase: str, field: str = "sec") -> list:
    """One phase's values of ``field`` for every step, in order, checked to be one event after another."""
    found, expected_first = [], 0
    for event in of_type(events, "samples"):
        if event["phase"] == phase:
            assert event["first_iter"] == expected_first
            expected_first += len(event["sec"])
            found.extend(event.get(field, [None] * len(event["sec"])))
    return found


# -- counting a batch's examples --------------------------------------------------------------------------------

Pair = collections.namedtuple("Pair", "images labels")


@dataclasses.dataclass
class Inputs:
    ids: object
    mask: object


def test_a_batch_s_examples_are_the_leading_dimension_of_its_first_tensor():
    from bench_kernels.probe_steps import batch_examples

    images, labels = torch.zeros(8, 3, 4, 4), torch.zeros(8, dtype=torch.long)
    assert batch_examples(images) == 8
    assert batch_examples((images, labels)) == batch_examples([images, labels]) == 8
    assert batch_examples({"input_ids": torch.zeros(5, 16), "labels": torch.zeros(5)}) == 5
    assert batch_examples(Pair(torch.zeros(6, 2), labels)) == 6
    assert batch_examples(Inputs(torch.zeros(7, 3), torch.zeros(7, 3))) == 7
    assert batch_examples(({"x": torch.zeros(3, 1)}, ["text"] * 3)) == 3  # nested, other things beside
    for unreadable in ([0.5, 1.5], "text", None, object(), torch.tensor(3.0), {"n": 4}):
        assert batch_examples(unreadable) is None


# -- the probe in this process, around real training loops ------------------------------------------------------

class InProcess:
    """The probe installed in this process as the rank installs it, with its events file under ``tmp_path``."""

    def __init__(self, tmp_path, trace_to=None, **changes):
        from bench_kernels.script_probe import ScriptProbe

        self.path = str(tmp_path / "rank-0.jsonl")
        self.writer = wire.EventWriter(self.path, 0, flush_interval=0.0)
        self.probe = ScriptProbe(torch, self.writer, script_config(**changes), world_size=1, trace_to=trace_to)

    def run(self, loop) -> str:
        """Run ``loop`` under the probe; who ended it, ddptop or the loop itself."""
        from bench_kernels.script_probe import ProbeStop

        self.probe.install()
        try:
            loop()
            ended_by = wire.ENDED_BY_SCRIPT
        except ProbeStop:
            ended_by = wire.ENDED_BY_DDPTOP
        finally:
            self.probe.uninstall()
        self.probe.finish()
        self.writer.emit("config_end", **self.probe.config_end(ended_by))
        self.writer.close()
        return ended_by

    def events(self) -> list[dict]:
        return read_events(self.path)


def _model_and_loader(batch_size=4, batches=64, collate_fn=None):
    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.randn(batch_size * batches, 3), torch.randint(0, 2, (batch_size * batches,)))
    model = torch.nn.Linear(3, 2)
    return model, DataLoader(dataset, batch_size=batch_size, collate_fn=collate_fn)


def _train(model, loader, optimizer, accumulate=1, steps=1000):
    batches = iter(loader)
    for _ in range(steps):
        for _ in range(accumulate):
            x, y = next(batches)
            torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def test_a_step_counts_every_batch_drawn_since_the_step_before_and_ddptop_ends_the_loop(tmp_path):
    from torch.optim.optimizer import _global_optimizer_post_hooks
    from torch.utils.data import DataLoader

    original_iter, hooks_before = DataLoader.__iter__, len(_global_optimizer_post_hooks)
    run = InProcess(tmp_path, warmup=2, iters=5)
    model, loader = _model_and_loader()
    assert run.run(lambda: _train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), accumulate=3)) == "ddptop"
    events = run.events()
    assert steps(events, "warmup", "examples") == [12] * 2 and steps(events, "measure", "examples") == [12] * 5
    assert len(steps(events, "measure", "data_wait")) == 5 and all(w >= 0 for w in steps(events, "measure", "data_wait"))
    (end,) = of_type(events, "config_end")
    assert (end["iters"], end["warmup_iters"], end["stop_reason"], end["ended_by"]) == (5, 2, "fixed", "ddptop")
    assert end["script"]["optimizer_steps"] == 7 and end["script"]["step_marks"] == "optimizer"
    assert end["script"]["process_group"] is False and end["note"] is None
    # uninstalled: the class and torch's hooks as they were
    assert DataLoader.__iter__ is original_iter and len(_global_optimizer_post_hooks) == hooks_before


def test_a_second_optimizer_stepping_within_a_step_is_part_of_it(tmp_path):
    """A GAN's two optimizers: the step ends at the one that stepped first in the run."""
    run = InProcess(tmp_path, warmup=1, iters=3)
    generator, loader = _model_and_loader()
    critic = torch.nn.Linear(2, 1)
    first = torch.optim.SGD(critic.parameters(), lr=0.1)
    second = torch.optim.Adam(generator.parameters(), lr=0.1)

    def loop():
        for x, _ in loader:
            critic(generator(x).detach()).mean().backward()
            first.step()
            critic(generator(x)).mean().backward()
            second.step()

    assert run.run(loop) == "ddptop"
    events = run.events()
    assert steps(events, "measure", "examples") == [4] * 3
    (end,) = of_type(events, "config_end")
    assert end["script"]["optimizer_steps"] == 2 * 4 - 1  # the fourth step ended at its first optimizer's


def test_an_optimizer_made_again_ends_the_steps_once_the_first_is_gone(tmp_path):
    run = InProcess(tmp_path, warmup=2, iters=4)
    model, loader = _model_and_loader()

    def loop():
        for _ in range(10):  # a stage of three steps, each with an optimizer of its own
            _train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), steps=3)

    assert run.run(loop) == "ddptop"
    assert len(steps(run.events(), "measure")) == 4


def test_explicit_marks_win_and_carry_the_script_s_counts(tmp_path):
    import ddptop_probe

    run = InProcess(tmp_path, warmup=1, iters=2)
    model, loader = _model_and_loader(batch_size=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop():
        batches = iter(ddptop_probe.batches(loader))  # a loader's batches, timed once
        for _ in range(100):
            with ddptop_probe.step(tokens=40):  # examples: counted from the batches it drew
                for _ in range(2):
                    x, y = next(batches)
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()  # twice a step: an optimizer step no longer ends one
                optimizer.step()
        raise AssertionError("ddptop should have ended the loop")

    assert run.run(loop) == "ddptop"
    events = run.events()
    assert steps(events, "measure", "examples") == [4, 4] and steps(events, "measure", "tokens") == [40.0, 40.0]
    (end,) = of_type(events, "config_end")
    assert end["script"]["step_marks"] == "explicit" and end["script"]["optimizer_steps"] == 6
    assert not ddptop_probe.active()  # unregistered with the probe


class Unreadable:
    """A batch that breaks the counter: every attribute it lacks raises something other than AttributeError."""

    def __init__(self, samples):
        self.x = torch.stack([s[0] for s in samples])
        self.y = torch.stack([s[1] for s in samples])

    def __getattr__(self, name):
        raise RuntimeError(f"no field {name}")


def test_a_batch_that_breaks_the_counter_reaches_the_script_unchanged(tmp_path):
    run = InProcess(tmp_path, warmup=1, iters=4)
    model, loader = _model_and_loader(collate_fn=Unreadable)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def loop():
        for batch in loader:
            seen.append(type(batch))
            torch.nn.functional.cross_entropy(model(batch.x), batch.y).backward()
            optimizer.step()

    assert run.run(loop) == "ddptop"
    assert seen == [Unreadable] * 5
    events = run.events()
    assert len(steps(events, "measure")) == 4 and steps(events, "measure", "examples") == [None] * 4
    (end,) = of_type(events, "config_end")
    assert "batch waits and examples not measured from step 1 on" in end["note"]
    assert "RuntimeError: no field __dataclass_fields__" in end["note"]


def test_a_batch_without_a_tensor_is_a_step_of_unknown_examples(tmp_path):
    run = InProcess(tmp_path, warmup=1, iters=2)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    from torch.utils.data import DataLoader

    loader = DataLoader([[0.5, 1.0]] * 8, batch_size=None)  # python floats: nothing to count

    def loop():
        for values in loader:
            model(torch.tensor([[values[0]]])).sum().backward()
            optimizer.step()

    run.run(loop)
    events = run.events()
    assert steps(events, "measure", "examples") == [None, None]
    assert all(w is not None for w in steps(events, "measure", "data_wait"))  # the waits are still timed
    assert "examples not counted: a batch of type list" in of_type(events, "config_end")[0]["note"]


def test_a_script_that_ends_before_the_planned_steps_ended_itself(tmp_path):
    run = InProcess(tmp_path, warmup=2, iters=10)
    model, loader = _model_and_loader()
    assert run.run(lambda: _train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), steps=5)) == "script"
    (end,) = of_type(run.events(), "config_end")
    assert (end["iters"], end["warmup_iters"], end["stop_reason"], end["ended_by"]) == (3, 2, "script", "script")


def test_script_to_end_measures_every_step_past_the_planned_ones(tmp_path):
    run = InProcess(tmp_path, warmup=1, iters=2, script_to_end=True)
    model, loader = _model_and_loader()
    assert run.run(lambda: _train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), steps=9)) == "script"
    events = run.events()
    assert len(steps(events, "measure")) == 8
    assert {e["of"] for e in of_type(events, "samples") if e["phase"] == "measure"} == {None}  # the script decides
    (end,) = of_type(events, "config_end")
    assert (end["iters"], end["ended_by"], end["stop_reason"]) == (8, "script", "script")


def test_the_step_stream_keeps_each_list_aligned_with_sec(tmp_path):
    from bench_kernels.probe_steps import StepStream

    writer = wire.EventWriter(str(tmp_path / "r.jsonl"), 0, flush_interval=3600)
    stream = StepStream(writer, "c", "measure", 4, None)
    for wait, examples in ((0.1, 8), (0.2, 8), (None, None), (0.1, None)):
        stream.add_step(0.5, wait, examples, None)
    stream.close()
    writer.close()
    events = read_events(str(tmp_path / "r.jsonl"))
    assert [(e["first_iter"], len(e["sec"]), e.get("data_wait"), e.get("examples")) for e in events] == [
        (0, 2, [0.1, 0.2], [8, 8]), (2, 1, None, None), (3, 1, [0.1], None)]


def test_the_hello_of_a_gpu_launch_leaves_cuda_for_the_script_to_start(tmp_path):
    """The rank names its GPU launch's device without starting CUDA (the script chooses and starts its own)."""
    if torch.version.cuda is None:
        pytest.skip("a CPU-only build of torch")
    spec = LaunchSpec(launch_id="01-n1-nccl", events_dir=str(tmp_path), device="cuda", backend="nccl",
                      threads_per_rank=0, configs=(script_config(),))
    code = ("import torch, json, sys; from bench_kernels.hello import hello_fields; "
            "from ddptop.protocol.launchspec import LaunchSpec; spec = LaunchSpec.read(sys.argv[1]); "
            "fields = hello_fields(torch, spec, torch.device('cuda', 0), 0, 1, 0, ('not bound', None), "
            "name_device=False); print(json.dumps([fields['device'], fields['device_name'], "
            "torch.cuda.is_initialized()]))")
    path = tmp_path / "launch.json"
    path.write_text(spec.dumps())
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert done.stdout.strip() == '["cuda:0", null, false]'


FORKED_CHILD = """
import os, signal, sys, time
from bench_kernels.rank_process import raise_on_stop_signals

class Stopped(BaseException):
    pass

raise_on_stop_signals(Stopped, only_here=True)
pid = os.fork()
if pid == 0:  # a loader's worker, say: the signal ends it as it would have without the handler
    os.kill(os.getpid(), int(sys.argv[1]))
    time.sleep(5)
    os._exit(3)
_, status = os.waitpid(pid, 0)
try:
    os.kill(os.getpid(), int(sys.argv[1]))
    time.sleep(5)
except Stopped as stop:
    print(os.waitstatus_to_exitcode(status), stop)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_raises_in_the_rank_alone_not_in_a_process_forked_from_it(signum):
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD, str(int(signum))], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=REPO), timeout=60)
    # killed by the signal (SIGINT through KeyboardInterrupt, which Python ends that way when nothing catches it)
    assert done.stdout.split() == [str(-signum), signal.Signals(signum).name], done.stderr


# -- ddptop_probe outside ddptop ---------------------------------------------------------------------------------

def test_ddptop_probe_outside_ddptop_does_nothing_and_costs_nothing():
    import ddptop_probe

    assert not ddptop_probe.active()
    items = [1, 2, 3]
    assert ddptop_probe.batches(items) is items
    with ddptop_probe.step(examples=3, tokens=12) as marked:
        assert marked is None
    assert ddptop_probe.step() is ddptop_probe.step(examples=1)  # one shared do-nothing: nothing made per step


def test_ddptop_probe_is_standard_library_only():
    code = ("import sys; before = set(sys.modules); import ddptop_probe; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names); "
            "assert new == {'ddptop_probe'}, new")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_the_probe_loads_nothing_of_the_kernel_s_training_into_the_user_s_process():
    """What runs inside the user's process imports only what it uses: the probe, its hooks and the protocol,
    not the kernel's training loop, its model sources and catalogue, its faults or ddptop's analysis; no torch
    until the rank starts the script (the script imports it itself)."""
    code = ("import sys; import bench_kernels.script_probe; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('bench_kernels', 'ddptop', 'torch', "
            "'numpy'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True,
                                text=True).stdout.split())
    assert not {"torch", "numpy", "bench_kernels.training", "bench_kernels.comm_probe", "bench_kernels.sources",
                "bench_kernels.faults", "ddptop.protocol.catalog", "ddptop.protocol.modelspec"} & loaded, loaded
    assert not any(m.startswith(("ddptop.analysis", "ddptop.report", "ddptop.run", "ddptop.tui")) for m in loaded)
    assert {"bench_kernels.probe_sync", "bench_kernels.batches", "bench_kernels.ddp_logging"} <= loaded


def test_the_command_names_a_script_or_a_module():
    from bench_kernels.script_target import parse_command

    spec, target = parse_command(["--spec", "l.json", "--", "train.py", "--", "x"])
    assert (spec, target.path, target.module, target.args) == ("l.json", "train.py", None, ("--", "x"))
    _, target = parse_command(["--spec", "l.json", "--", "-m", "pkg.train", "-v"])
    assert (target.path, target.module, target.args) == (None, "pkg.train", ("-v",))
    for wrong in (["--spec", "l.json", "train.py"], ["--spec", "l.json", "--"], ["--spec", "l.json", "--", "-m"]):
        with pytest.raises(SystemExit):
            parse_command(wrong)


# -- the new fields of a samples event -------------------------------------------------------------------------

def test_the_lists_beside_sec_hold_one_non_negative_value_per_step():
    base = {"v": 1, "type": "samples", "t": 1.0, "rank": 0, "config_id": "c", "phase": "measure", "first_iter": 0,
            "sec": [0.1, 0.2]}
    wire.validate({**base, "data_wait": [0.0, 0.05], "examples": [8, 8], "tokens": [100.0, 96]})
    for wrong, reason in (({"data_wait": [0.1]}, "1 values for 2 steps"), ({"examples": [8, 8.5]}, "integers"),
                          ({"tokens": [1, -1]}, "non-negative"), ({"examples": [True, 1]}, "integers")):
        with pytest.raises(wire.MalformedEvent, match=reason):
            wire.validate({**base, **wrong})


# -- real launches ------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment() -> dict:
    return dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")


def _write_spec(tmp_path, world_size, **changes) -> tuple[str, str]:
    events = tmp_path / "events"
    events.mkdir(exist_ok=True)  # the sweep makes it before the launch
    cfg = script_config(config_id=f"train/n{world_size}", world_size=world_size, global_batch=2 * world_size,
                        **changes)
    spec = LaunchSpec(launch_id=f"01-n{world_size}-gloo", events_dir=str(events), device="cpu", backend="gloo",
                      threads_per_rank=1, configs=(cfg,))
    path = tmp_path / "launch.json"
    path.write_text(spec.dumps())
    return str(path), str(events)


def launch(tmp_path, world_size: int, script: list[str], **changes):
    """``script`` under the probe in a real torchrun launch of ``world_size`` ranks: torchrun's result and each
    rank's events. Nothing of the launch may outlive it."""
    spec, events = _write_spec(tmp_path, world_size, **changes)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                           f"--nproc-per-node={world_size}", "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
                           "-m", "bench_kernels.script_probe", "--spec", spec, "--", *script],
                          cwd=REPO, env=_environment(), capture_output=True, text=True, timeout=300)
    assert processes_mentioning(spec) == []
    return done, {rank: read_events(os.path.join(events, f"rank-{rank}.jsonl")) for rank in range(world_size)}


BATCH, ACCUMULATE, TRANSFORM_MS = 4, 2, 2.0


@pytest.mark.slow
def test_a_training_script_unchanged_is_measured_on_two_ranks_and_ended_by_ddptop(tmp_path):
    """examples/train.py as it is: DDP on gloo, a DistributedSampler, two batches a step (no_sync on the first).
    Each batch waits BATCH x TRANSFORM_MS for its examples (no loader workers): the measured data wait is that,
    give or take the sleeps' overshoot and the collation (at most 5 ms or half the delay over, never under)."""
    done, by_rank = launch(tmp_path, 2, [TRAIN, "--batch-size", str(BATCH), "--accumulate", str(ACCUMULATE),
                                         "--transform-ms", str(TRANSFORM_MS), "--steps", "1000"], warmup=2, iters=6)
    assert done.returncode == 0, done.stderr[-3000:]
    injected = BATCH * ACCUMULATE * TRANSFORM_MS / 1000
    for rank, events in by_rank.items():
        assert [e["type"] for e in events[:3]] == ["hello", "config_start", "heartbeat"]
        assert events[2]["setup"] is True and events[-1]["type"] == "bye"
        assert len(steps(events, "warmup")) == 2 and len(steps(events, "measure")) == 6
        assert steps(events, "measure", "examples") == [BATCH * ACCUMULATE] * 6
        waits = steps(events, "measure", "data_wait")
        assert injected <= statistics.median(waits) <= injected + max(0.005, injected / 2), (rank, waits)
        assert all(w <= s for w, s in zip(waits, steps(events, "measure")))
        (end,) = of_type(events, "config_end")
        assert (end["status"], end["ended_by"], end["iters"], end["stop_reason"]) == ("ok", "ddptop", 6, "fixed")
        seen = end["script"]
        assert (seen["process_group"], seen["group_world_size"], seen["launch_world_size"]) == (True, 2, 2)
        assert (seen["optimizer_steps"], seen["spawned"], seen["step_marks"]) == (8, 0, "optimizer")
    assert "trained" not in done.stdout  # the script never reached its own end


@pytest.mark.slow
def test_explicit_marks_with_loader_workers_on_one_rank(tmp_path):
    """--explicit: ddptop_probe marks the steps (examples and tokens of the script's own count) and times the
    batches of two persistent loader workers; the workers end with the rank. The script run as a module (-m)."""
    done, by_rank = launch(tmp_path, 1, ["-m", "examples.train", "--explicit", "--batch-size", "3", "--accumulate", "3", "--workers",
                                         "2", "--features", "16", "--steps", "1000"], warmup=1, iters=4)
    assert done.returncode == 0, done.stderr[-3000:]
    events = by_rank[0]
    assert steps(events, "measure", "examples") == [9] * 4 and steps(events, "measure", "tokens") == [9 * 16.0] * 4
    assert len(steps(events, "measure", "data_wait")) == 4
    (end,) = of_type(events, "config_end")
    assert (end["ended_by"], end["iters"], end["script"]["step_marks"]) == ("ddptop", 4, "explicit")
    assert end["script"]["process_group"] is True and events[-1]["type"] == "bye"
    assert of_type(events, "config_start")[0]["command"][:3] == ["-m", "examples.train", "--explicit"]


RAISES = """
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.ones(4, 2)).sum().backward()
    optimizer.step()


def fail():
    raise ValueError("the script's own failure after 3 steps")


try:
    fail()
except Exception:  # the script's own handler, re-raising: the probe's stop would pass it, this does not
    raise
"""


@pytest.mark.slow
def test_a_script_that_raises_ends_its_configuration_with_its_own_error(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text(RAISES)
    done, by_rank = launch(tmp_path, 1, [str(script)], warmup=1, iters=10)
    assert done.returncode != 0
    events = by_rank[0]
    assert len(steps(events, "warmup")) == 1 and len(steps(events, "measure")) == 2  # sent before the error
    (error,) = of_type(events, "error")
    assert (error["error_type"], error["message"]) == ("ValueError", "the script's own failure after 3 steps")
    assert error["config_id"] == "train/n1" and error["oom"] is False
    assert "runpy" not in error["traceback"] and "script_probe" not in error["traceback"]
    assert error["traceback"].count(str(script)) == 2  # the script's module frame, then its function's
    (end,) = of_type(events, "config_end")
    assert end["status"] == "failed" and end["script"]["optimizer_steps"] == 3
    assert not of_type(events, "bye")
    assert "ValueError: the script's own failure" in done.stderr  # the script's traceback in the rank's log


@pytest.mark.slow
def test_a_batch_the_probe_cannot_read_still_trains_and_the_script_ends_itself(tmp_path):
    """Fail-open at a real launch: the counter breaks on the script's batch class; the script trains its 4 steps
    (fewer than planned) and ends on its own."""
    script = tmp_path / "odd_batches.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        class Batch:
            def __init__(self, samples):
                self.x = torch.stack([s[0] for s in samples])
                self.y = torch.stack([s[1] for s in samples])

            def __getattr__(self, name):
                raise RuntimeError(f"no field {name}")

        data = TensorDataset(torch.randn(16, 2), torch.randn(16, 1))
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in DataLoader(data, batch_size=4, collate_fn=Batch):
            torch.nn.functional.mse_loss(model(batch.x), batch.y).backward()
            optimizer.step()
        print("trained", len(data) // 4, "steps")
    """))
    done, by_rank = launch(tmp_path, 1, [str(script)], warmup=1, iters=10)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 4 steps" in done.stdout
    events = by_rank[0]
    assert len(steps(events, "measure")) == 3 and steps(events, "measure", "examples") == [None] * 3
    (end,) = of_type(events, "config_end")
    assert (end["status"], end["ended_by"], end["stop_reason"], end["iters"]) == ("ok", "script", "script", 3)
    assert "RuntimeError: no field __dataclass_fields__" in end["note"]


@pytest.mark.slow
def test_iters_auto_stops_every_rank_after_the_same_agreed_step(tmp_path):
    """--iters auto: the precision rule, agreed between blocks by an all_reduce over the script's own group."""
    done, by_rank = launch(tmp_path, 2, [TRAIN, "--batch-size", "4", "--steps", "1000"], warmup=1, iters=None,
                           min_iters=10, max_iters=20, max_time_per_config=30.0, precision=0.2)
    assert done.returncode == 0, done.stderr[-3000:]
    ends = [of_type(events, "config_end")[0] for events in by_rank.values()]
    counts = {len(steps(events, "measure")) for events in by_rank.values()}
    assert len(counts) == 1 and 10 <= counts.pop() <= 20
    assert {(e["iters"], e["stop_reason"], e["ended_by"]) for e in ends} == {
        (ends[0]["iters"], ends[0]["stop_reason"], "ddptop")}
    assert ends[0]["stop_reason"] in ("precision", "max_iters", "max_time") and ends[0]["precision_target"] == 0.2


LOOPS = """
import time
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    model(torch.ones(4, 2)).sum().backward()
    optimizer.step()
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_sigterm_sends_what_was_measured_and_exits_as_stopped(tmp_path):
    script = tmp_path / "loops.py"
    script.write_text(LOOPS)
    spec, events_dir = _write_spec(tmp_path, 1, warmup=1, iters=None, script_to_end=True)
    env = dict(_environment(), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    process = subprocess.Popen([sys.executable, "-m", "bench_kernels.script_probe", "--spec", spec, "--",
                                str(script)], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    path = os.path.join(events_dir, "rank-0.jsonl")
    deadline = time.monotonic() + 120
    while not (os.path.exists(path) and '"phase":"measure"' in open(path).read()):
        assert time.monotonic() < deadline and process.poll() is None, "no measured step came"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == STOPPED_EXIT, process.stderr.read()[-3000:]
    events = read_events(path)
    assert len(steps(events, "measure")) >= 1 and not of_type(events, "config_end") and not of_type(events, "bye")

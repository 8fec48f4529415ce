"""The trainers users train with, unchanged under ``ddptop run --``: the Hugging Face Trainer (accelerate makes
the process group, the DDP model and its gradient accumulation under ``no_sync``) and Lightning's Trainer (its
DDP strategy, ``accumulate_grad_batches``). Each wraps the loader and the optimizer in its own classes; the
probe still sees every step, every micro-batch's examples, the data wait and the synchronisation, and places
the DDP model at the user's line through the library's.

Slow (real torchrun launches with gloo at N = 1, 2) and optional: each is skipped, with the reason, where its
framework is not installed (``pip install -e ".[frameworks]"``).
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from ddptop.analysis import step_bound
from tests.conftest import REPO, ddptop, processes_mentioning

EXAMPLES = os.path.join(REPO, "examples")


def _needs(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed: pip install -e \".[frameworks]\"")


def _run(tmp_path, script: str, *args: str) -> tuple[dict[int, dict], str]:
    run_dir = str(tmp_path / "run")
    done = ddptop("run", "--headless", "--no-plots", "--out", run_dir, "--world-sizes", "1,2", "--warmup", "3",
                  "--iters", "8", "--launches", "1", "--trace-steps", "1", "--", f"examples/{script}", *args,
                  timeout=400, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert processes_mentioning(run_dir) == []
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        configs = {c["world_size"]: c for c in json.load(handle)["configs"]}
    return configs, ddptop("report", run_dir).stdout


def _line(script: str, text: str) -> int:
    with open(os.path.join(EXAMPLES, script), encoding="utf-8") as handle:
        return next(i for i, line in enumerate(handle, 1) if text in line)


def _common(configs: dict[int, dict], batch: int, accumulate: int) -> None:
    for n, config in configs.items():
        assert (config["status"], config["ended_by"], config["measured_iters"]) == ("ok", "ddptop", 8), config
        examples = {v for values in config["step_values"]["examples"].values() for v in values}
        assert examples == {batch * accumulate}, (n, examples)  # every micro-batch counted
        assert config["data_wait"]["share"] is not None and config["trace"]["steps"] == 1
    sync = configs[2]["grad_sync"]
    # one synchronisation a step over its micro-batches: the framework's no_sync around the others
    assert (sync["synchronises"], sync["micro_batches"], sync["syncs"]) == (True, accumulate, 1), sync
    assert sync["exposed_comm_s"] is not None and not sync["every_micro_batch"]
    assert configs[2]["verdict"]["kind"] != step_bound.NOT_DATA_PARALLEL
    # the gradient norms taken around the framework's DDP allreduce, every measured step (one sync each), and
    # DDP's own logging naming no hook: the probe's is not the script's
    noise = configs[2]["gradient_noise"]
    assert (noise["syncs"], noise["batch_local"], noise["batch_global"]) == (8, batch * accumulate,
                                                                             2 * batch * accumulate), noise
    assert configs[2]["script"]["wrappers"][0].get("comm_hook") is None


@pytest.mark.slow
@_needs("transformers", "accelerate")
def test_the_hugging_face_trainer_is_measured_through_accelerate(tmp_path):
    configs, report = _run(tmp_path, "hf_trainer.py", "--accumulate", "2", "--batch-size", "4", "--steps", "1000")
    _common(configs, batch=4, accumulate=2)
    site = f"examples/hf_trainer.py:{_line('hf_trainer.py', 'Trainer(model=')}"
    wrapper = configs[2]["script"]["wrappers"][0]
    assert wrapper["site"] == site and wrapper["via"].startswith("accelerate/accelerator.py:"), wrapper
    assert f"DistributedDataParallel at {site} (through accelerate/accelerator.py:" in report


@pytest.mark.slow
@_needs("lightning")
def test_lightning_s_trainer_is_measured_through_its_ddp_strategy(tmp_path):
    configs, report = _run(tmp_path, "lightning_train.py", "--accumulate", "2", "--batch-size", "16",
                           "--steps", "1000")
    _common(configs, batch=16, accumulate=2)
    site = f"examples/lightning_train.py:{_line('lightning_train.py', 'trainer.fit(')}"
    wrapper = configs[2]["script"]["wrappers"][0]
    assert wrapper["site"] == site and wrapper["via"].startswith("lightning/pytorch/strategies/ddp.py:"), wrapper
    assert "Compute vs communication" in report

"""Numbers you can trust, end to end: two runs of the same plan on the same machine, and a regression gate."""

import json

import pytest

from .conftest import run_sweep

# steps of a few milliseconds: long enough that the scheduler's jitter on a shared core is not the figure
TINY = ("--models", "tests.tiny_models:tiny_cnn", "--image-size", "64", "--num-classes", "10",
        "--batch-sizes", "32", "--world-sizes", "1", "--no-collectives", "--comm-iters", "0",
        "--telemetry-interval", "0")


@pytest.mark.slow
def test_the_same_plan_twice_is_within_noise_and_passes_the_gate(tmp_path):
    # Runs on one machine drift apart (here: 10-40% between two runs minutes apart); rounds put that drift
    # into each run's interval, which is what makes an A/A comparison quiet.
    first = run_sweep(str(tmp_path / "a"), *TINY, "--rounds", "3")
    assert first.returncode == 0, first.stderr
    second = run_sweep(str(tmp_path / "b"), *TINY, "--rounds", "3", "--baseline", str(tmp_path / "a"),
                       "--fail-on-regression", "5")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"Compared with {tmp_path / 'a'}" in second.stdout
    compared = second.stdout.split("Compared with", 1)[1]
    for entry in second.summary()["configs"]:
        assert entry["stats"]["p50_ci"][0] <= entry["stats"]["sec_iter"]["p50"] <= entry["stats"]["p50_ci"][1]
    assert "slower" not in compared.replace("slower by more", "") and "faster" not in compared


@pytest.mark.slow
def test_the_gate_fails_a_run_slower_than_its_baseline(tmp_path):
    baseline = run_sweep(str(tmp_path / "a"), *TINY)
    assert baseline.returncode == 0, baseline.stderr
    saved = baseline.summary()
    for entry in saved["configs"]:  # the baseline was 30% faster on every step
        entry["samples"] = {rank: [0.7 * s for s in values] for rank, values in entry["samples"].items()}
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(saved))
    slower = run_sweep(str(tmp_path / "b"), *TINY, "--baseline", str(faster), "--fail-on-regression", "5")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "slower" in slower.stdout and "Failing:" in slower.stdout

"""A full disk or an exhausted quota, by injection through the very code that writes (``os.write`` raising
ENOSPC half-way through a file, ``DDPTOP_FAULT_DISK_FULL``): the tables are printed from memory, the summary
goes to the fallback directory, no temporary file is left, exit code 1, never a traceback."""

import errno
import glob
import json
import os

import pytest

from ddptop import rundir
from ddptop.report import sections, store
from tests.conftest import REPO, processes_mentioning, run_sweep


def test_a_write_that_runs_out_of_space_leaves_nothing_behind(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("the previous summary\n")
    monkeypatch.setenv(rundir.DISK_FULL_ENV, str(tmp_path))
    with pytest.raises(OSError) as caught:
        rundir.write_atomic(str(target), "x" * 10_000)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert target.read_text() == "the previous summary\n"  # whole or not at all
    assert os.listdir(tmp_path) == ["summary.json"]  # no summary.json.tmp-<pid>
    assert rundir.describe_os_error(caught.value, str(target)) == "no space left on device writing summary.json"


def test_the_summary_goes_to_the_fallback_and_the_closing_text_says_so(tmp_path, monkeypatch):
    summary, _ = store.load_target(os.path.join(REPO, "tests", "data", "recorded-run"), rebuild=True)
    summary["run_dir"] = str(tmp_path / "run")
    os.makedirs(tmp_path / "run")
    monkeypatch.setattr(store, "_write_summary", _failing_only_in(str(tmp_path / "run"), store._write_summary))
    paths = store.save_summary(summary, str(tmp_path / "run"), str(tmp_path / "fallback"))
    assert paths["save_error"] == "no space left on device writing summary.json"
    assert paths["fallback"].startswith(str(tmp_path / "fallback")) and os.path.exists(paths["json"])
    assert oct(os.stat(tmp_path / "fallback").st_mode & 0o777) == "0o700"  # user-only
    line = sections.saved_line(summary, paths)
    assert line.startswith(f"Summary not saved in {tmp_path / 'run'}: no space left on device writing summary.json; "
                           f"written to {paths['fallback']} instead. Once there is room: ddptop report ")
    # the fallback full as well: nothing saved, and the way to save it later
    monkeypatch.setenv(rundir.DISK_FULL_ENV, str(tmp_path))
    nowhere = store.save_summary(summary, str(tmp_path / "run"), str(tmp_path / "fallback"))
    assert "json" not in nowhere and nowhere["fallback_error"].startswith("no space left on device")
    assert sections.saved_line(summary, nowhere).endswith(f"then run: ddptop report {tmp_path / 'run'} --rebuild\n")


def _failing_only_in(directory, write):
    def failing(summary, target):
        if os.path.abspath(target) == os.path.abspath(directory):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(target, "summary.json"))
        return write(summary, target)

    return failing


def test_a_full_disk_before_the_run_is_one_line(tmp_path):
    from tests.conftest import ddptop

    done = ddptop("run", "--headless", "--out", str(tmp_path / "run"), "--iters", "2",
                  env={rundir.DISK_FULL_ENV: str(tmp_path / "run")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ddptop: error: cannot write the run directory {tmp_path / 'run'}: no space left on device writing "
        "environment.json"]


@pytest.mark.slow
def test_a_full_disk_at_the_end_prints_every_table_and_saves_to_the_fallback(tmp_path, monkeypatch):
    run_dir, fallback = tmp_path / "run", tmp_path / "fallback"
    monkeypatch.setenv(rundir.DISK_FULL_ENV, str(run_dir / "summary"))  # the summary files only
    done = run_sweep(str(run_dir), "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32",
                     "--num-classes", "10", "--batch-sizes", "2", "--world-sizes", "1,2", "--warmup", "1",
                     "--iters", "4", "--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0",
                     "--fallback-dir", str(fallback))
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "Scaling: tests.tiny_models:tiny_cnn" in done.stdout and "Why it is not faster" in done.stdout
    assert f"Summary not saved in {run_dir}: no space left on device writing summary.json" in done.stdout
    (saved,) = glob.glob(str(fallback / "run-*" / "summary.json"))
    with open(saved, encoding="utf-8") as handle:
        configs = json.load(handle)["configs"]
    assert [c["status"] for c in configs] == ["ok"] * 3
    assert not os.path.exists(run_dir / "summary.json")
    assert glob.glob(str(run_dir / "**" / "*.tmp-*"), recursive=True) == []
    assert processes_mentioning(str(run_dir)) == []

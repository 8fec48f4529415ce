"""``ddptop doctor`` as a user runs it: a real subprocess, its table, doctor.json and exit code; on this CPU
machine, and under simulated nodes with a stand-in nvidia-smi (tests/bin/nvidia-smi) answering from the same
node, the DGX-1's `topo -m` being the published one."""

import json
import os
import shutil

import pytest

from ddptop.doctor import parse_query_gpu, parse_topo_matrix
from tests.conftest import REPO, ddptop

STAND_IN = os.path.join(REPO, "tests", "bin")
DATA = os.path.join(REPO, "tests", "data", "nvidia-smi")


def doctor(tmp_path, *args, env=None):
    done = ddptop("doctor", "--out", str(tmp_path), *args, env=env, timeout=600)
    with open(tmp_path / "doctor.json", encoding="utf-8") as handle:
        saved = json.load(handle)
    return done, {c["name"]: c for c in saved["checks"]}, saved


def without_smi_path():
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "nvidia-smi")))


def test_on_this_cpu_machine_what_does_not_apply_is_skipped_with_the_reason(tmp_path):
    done, checks, saved = doctor(tmp_path, "--skip-loop", env={"DDPTOP_FAKE_NVML": "", "PATH": without_smi_path()})
    if checks["NVML"]["status"] == "ok":
        pytest.skip("this machine has a working NVML")
    assert done.returncode == 0 and saved["failed"] == 0, done.stdout + done.stderr
    assert checks["NVML"]["status"] == "skipped" and "NVML unavailable" in checks["NVML"]["detail"]
    assert checks["nvidia-smi vs NVML"] == {"name": "nvidia-smi vs NVML", "status": "skipped",
                                            "detail": "nvidia-smi is not on PATH"}
    assert checks["torch / CUDA / NCCL"]["status"] == "ok" and "torchvision" in checks["torch / CUDA / NCCL"]["detail"]
    assert checks["rendezvous store"]["status"] == "ok" and "127.0.0.1 only" in checks["rendezvous store"]["detail"]
    assert checks["kernel vs plain DDP loop"]["status"] == "skipped"
    assert "Traceback" not in done.stderr and done.stdout.splitlines()[0].split()[0] in ("ok", "skipped", "warn")


def test_the_published_dgx1_matrix_agrees_with_ddptop_topo_cell_by_cell(tmp_path):
    env = {"DDPTOP_FAKE_NVML": "dgx1", "PATH": STAND_IN + os.pathsep + without_smi_path()}
    done, checks, _ = doctor(tmp_path, "--skip-loop", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks["nvidia-smi vs NVML"]["status"] == "ok"
    assert checks["topo -m vs ddptop topo"] == {"name": "topo -m vs ddptop topo", "status": "ok",
                                                "detail": "144 cells agree"}


def test_a_cell_that_differs_fails_and_is_named(tmp_path):
    data = tmp_path / "smi"
    shutil.copytree(DATA, data)
    path = data / "dgx1" / "topo-m.txt"
    text = path.read_text().splitlines()
    text[1] = text[1].replace("NV1", "NV2", 1)  # GPU0 -> GPU1
    path.write_text("\n".join(text) + "\n")
    env = {"DDPTOP_FAKE_NVML": "dgx1", "PATH": STAND_IN + os.pathsep + without_smi_path(),
           "STAND_IN_SMI_DATA": str(data)}
    done, checks, saved = doctor(tmp_path / "out", "--skip-loop", env=env)
    assert done.returncode == 1 and saved["failed"] == 1
    assert checks["topo -m vs ddptop topo"]["status"] == "fail"
    assert checks["topo -m vs ddptop topo"]["detail"] == "GPU0/GPU1: nvidia-smi NV2, ddptop NV1"


def test_a_container_sees_the_same_two_gpus_through_both(tmp_path):
    env = {"DDPTOP_FAKE_NVML": "container", "PATH": STAND_IN + os.pathsep + without_smi_path()}
    done, checks, _ = doctor(tmp_path, "--skip-loop", env=env)
    assert checks["NVML"]["detail"].startswith("2 GPU(s)") and "not accessible" in checks["NVML"]["detail"]
    assert checks["nvidia-smi vs NVML"]["detail"] == "2 GPU(s): names, UUIDs and memory agree"
    assert checks["topo -m vs ddptop topo"]["status"] == "skipped"  # no published matrix for this node


def test_parsing_nvidia_smis_output():
    assert parse_query_gpu("0, NVIDIA H100 80GB HBM3, GPU-5c1e8f6a-0000, 81559, 00000000:18:00.0\n") == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5c1e8f6a-0000", "memory_mib": 81559}]
    with open(os.path.join(DATA, "dgx1", "topo-m.txt"), encoding="utf-8") as handle:
        cells = parse_topo_matrix(handle.read())
    assert len(cells) == 144 and cells[("GPU0", "GPU3")] == "NV2" and cells[("mlx5_2", "GPU4")] == "PIX"


@pytest.mark.slow
def test_ddptops_kernel_against_a_plain_ddp_loop(tmp_path):
    done, checks, _ = doctor(tmp_path, env={"DDPTOP_FAKE_NVML": "", "PATH": without_smi_path()})
    loop = checks["kernel vs plain DDP loop"]
    assert loop["status"] in ("ok", "warn") and "ratio" in loop["detail"], loop  # warn: a noisy machine
    ratio = float(loop["detail"].split("ratio ")[1].split(",")[0])
    assert 0.5 < ratio < 2.0

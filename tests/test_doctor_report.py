"""``ddptop doctor --report FILE`` and its replay: the real command writes every answer ddptop read from the
driver under a simulated node (tests/bin's stand-in nvidia-smi on PATH), ``DDPTOP_FAKE_NVML=FILE`` replays the
file as a simulated node, and ``ddptop topo`` and ``ddptop gpus`` on the replay show what the machine showed.
``--quick`` keeps the doctor's own checks from launching anything."""

import copy
import dataclasses
import json
import os

import pytest

from ddptop.doctor.driver_report import read_driver
from ddptop.telemetry.fake.nodes import ProfileError, load_profile, with_changes
from ddptop.telemetry.fake.recorded import REPORT_SCHEMA
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.fake.replay import ReplayNvml, replay_node
from ddptop.telemetry.topology import format_matrix, read_topology
from tests.conftest import REPO, ddptop
from tests.test_doctor import on_node, without_smi_path

SMI_DATA = os.path.join(REPO, "tests", "data", "nvidia-smi")
# what ddptop gpus --json reads once per GPU, from the driver: the fields a replay must give back
GPU_FIELDS = ("index", "name", "uuid", "bus_id", "memory_total", "power_limit_w", "sm_clock_max_mhz",
              "pcie_gen_max", "pcie_width_max", "mig_mode", "mig", "mem_clock_mhz", "mem_total")


def _gpus(env: dict) -> list[dict]:
    done = ddptop("gpus", "--json", "--interval", "0.05", env=env)
    assert done.returncode == 0, done.stderr
    return [{key: gpu.get(key) for key in GPU_FIELDS} for gpu in json.loads(done.stdout)["gpus"]]


@pytest.mark.parametrize("profile", ["dgx-a100", "pcie-4gpu", "a100-mig", "dgx-a100-nps4"])
def test_a_report_replays_as_a_node_that_prints_the_same_topology_and_gpus(tmp_path, profile):
    """8 A100s on NVSwitches with 8 NICs; 4 PCIe GPUs on two sockets on an old driver; an A100 in MIG mode; a
    DGX A100 in NPS4 whose nvidia-smi topo -m the stand-in prints (NIC0.. and a GPU NUMA ID column)."""
    report_path = str(tmp_path / "report.json")
    done = ddptop("doctor", "--quick", "--out", str(tmp_path), "--report", report_path, env=on_node(profile),
                  timeout=600)
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stdout + done.stderr
    assert f"Driver report: {report_path}" in done.stdout.splitlines()
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["schema"] == REPORT_SCHEMA and report["fake_nvml"] == profile
    assert oct(os.stat(report_path).st_mode & 0o777) == "0o600"

    # what it holds: NVML's raw answers, the NICs, nvidia-smi's matrix or why there is none, ddptop's views
    fake = FakeNvml(profile)
    gpus = report["gpus"]
    assert len(gpus) == fake.count and report["nvml"]["driver_version"] == {"value": fake.profile.driver_version}
    assert report["nvml"]["nvml_version"] == {"value": fake.profile.nvml_version}
    assert [g["pci"]["value"]["bus_id"] for g in gpus] == fake.bus_ids
    assert [g["uuid"]["value"] for g in gpus] == [g.uuid for g in fake.profile.gpus]
    assert all(g["numa_node_id"] == {"error": "NVML_ERROR_NOT_SUPPORTED"} for g in gpus)  # as x86 drivers answer
    assert all(g["power_limit_mw"] == {"value": spec.power_limit_w * 1000} for g, spec in zip(gpus, fake.profile.gpus))
    assert len(report["pairs"]) == fake.count * (fake.count - 1)
    assert [nic["name"] for nic in report["nics"]] == report["ddptop"]["topo_json"]["nics"]
    assert sorted(nic["name"] for nic in report["nics"]) == sorted(name for name, _ in fake.profile.nics)
    assert all(nic["path"][0].startswith("pci") and nic["path"][-1] == nic["bdf"] for nic in report["nics"])
    links = [link for link in gpus[0]["nvlinks"] if "value" in link["state"]]
    assert len(links) == fake.profile.gpus[0].nvlink_slots
    if fake.profile.gpus[0].nvlink_slots == 0:
        assert gpus[0]["nvlinks"] == [{"link": 0, "state": {"error": "NVML_ERROR_NOT_SUPPORTED"}}]
    if profile == "a100-mig":
        assert gpus[0]["mig_mode"] == {"value": [1, 1]} and len(gpus[0]["mig"]) == 7
        assert {m["name"]["value"] for m in gpus[0]["mig"]} == {"NVIDIA A100-SXM4-40GB MIG 1g.5gb (FAKE)"}
    smi_file = os.path.join(SMI_DATA, profile, "topo-m.txt")
    if os.path.exists(smi_file):
        with open(smi_file, encoding="utf-8") as handle:
            assert report["nvidia_smi"]["topo_m"] == handle.read() and report["nvidia_smi"]["problem"] is None
    else:
        assert report["nvidia_smi"]["topo_m"] is None
        assert report["nvidia_smi"]["problem"].startswith("nvidia-smi topo -m exited 6: No devices were found")
    assert [c["name"] for c in report["checks"]][0] == "NVML"  # the checks, once they ended
    original = ddptop("topo", env={"DDPTOP_FAKE_NVML": profile})
    assert report["ddptop"]["topo"] == original.stdout

    # the replay
    replay = {"DDPTOP_FAKE_NVML": report_path}
    topo = ddptop("topo", env=replay)
    assert topo.returncode == 0, topo.stderr
    assert topo.stdout == report["ddptop"]["topo"]
    as_json = ddptop("topo", "--json", env=replay)
    assert json.loads(as_json.stdout) == report["ddptop"]["topo_json"]
    assert _gpus(replay) == _gpus({"DDPTOP_FAKE_NVML": profile})
    static = ("index", "name", "uuid", "bus_id", "memory_total", "power_limit_w", "sm_clock_max_mhz", "pcie_gen_max",
              "pcie_width_max", "mig_mode")
    replayed = _gpus(replay)
    assert [{k: g[k] for k in static} for g in report["ddptop"]["gpus"]] == [{k: g[k] for k in static} for g in replayed]
    assert [[(m["uuid"], m["profile"], m["gpu_instance"]) for m in g["mig"]] for g in report["ddptop"]["gpus"]] == \
        [[(m["uuid"], m["profile"], m["gpu_instance"]) for m in g["mig"] or ()] for g in replayed]


def _report_of(fake: FakeNvml, path) -> str:
    """A report of ``fake`` made in this process (read_driver over it), with its ddptop topo."""
    report = {"schema": REPORT_SCHEMA, **read_driver(fake)}
    report["ddptop"] = {"topo": format_matrix(read_topology(fake))}
    path.write_text(json.dumps(report))
    return str(path)


def test_a_partial_dgx1_view_on_an_old_driver_replays_its_refusals(tmp_path):
    """A job allowed GPUs 0 and 5 of a DGX-1, on a driver without nvmlDeviceGetNvLinkRemoteDeviceType: the
    report holds the six refused handles, each link's far end by bus id and the driver's NO_PERMISSION for
    those GPUs; the replay answers the same, so the pair stays SYS (not NV6)."""
    fake = FakeNvml(with_changes(load_profile("dgx1"), lacks=frozenset({"nvmlDeviceGetNvLinkRemoteDeviceType"})))
    for hidden in (1, 2, 3, 4, 6, 7):
        fake.deny_gpu(hidden)
    path = _report_of(fake, tmp_path / "partial.json")
    report = json.loads(open(path, encoding="utf-8").read())
    assert [g["handle"] for g in report["gpus"]].count({"error": "NVML_ERROR_NO_PERMISSION"}) == 6
    assert report["gpus"][0]["nvlinks"][0]["remote_device_type"] == {"error": "NVML_ERROR_FUNCTION_NOT_FOUND"}
    assert set(map(json.dumps, report["bus_id_lookups"].values())) == {'{"error": "NVML_ERROR_NO_PERMISSION"}'}
    replayed = replay_node(path)
    topo = read_topology(replayed)
    assert format_matrix(topo) == report["ddptop"]["topo"]
    assert topo.link(0, 5) == "SYS" and topo.notes == ["GPU1: no permission", "GPU2: no permission",
                                                       "GPU3: no permission", "GPU4: no permission",
                                                       "GPU6: no permission", "GPU7: no permission"]
    assert replayed.calls["nvmlDeviceGetHandleByPciBusId"] == 6


def test_a_gpu_numa_node_and_a_cross_bridge_sys_platform_replay(tmp_path):
    """A GPU whose memory is a NUMA node (GPU NUMA ID 1) and a platform that reports SYS between host bridges of
    one NUMA node: the replay prints the same columns and cells."""
    profile = load_profile("pcie-4gpu")
    grace = with_changes(profile, gpus=tuple(dataclasses.replace(g, numa_node_id=1) for g in profile.gpus),
                         between_host_bridges="SYS")
    path = _report_of(FakeNvml(grace), tmp_path / "grace.json")
    topo = read_topology(replay_node(path))
    assert set(topo.gpu_numa_id.values()) == {"1"}
    assert format_matrix(topo) == json.loads(open(path, encoding="utf-8").read())["ddptop"]["topo"]


def test_a_replayed_node_is_not_a_plain_simulated_one():
    with pytest.raises(TypeError, match="replay"):
        FakeNvml(dataclasses.replace(load_profile("dgx1"), recorded=object()))


def test_on_a_machine_without_nvml_the_report_says_why_and_its_replay_is_refused(tmp_path):
    report_path = str(tmp_path / "report.json")
    done = ddptop("doctor", "--quick", "--out", str(tmp_path), "--report", report_path,
                  env={"DDPTOP_FAKE_NVML": "", "PATH": without_smi_path()}, timeout=600)
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    if report["nvml"]["problem"] is None:
        pytest.skip("this machine has a working NVML")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert report["gpus"] == [] and report["nvidia_smi"]["problem"] == "nvidia-smi is not on PATH"
    assert report["ddptop"]["topo"].startswith("GPUs: none shown (NVML")
    refused = ddptop("topo", env={"DDPTOP_FAKE_NVML": report_path})
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "the report holds no NVML answers to replay" in refused.stderr


def _damaged(tmp_path) -> dict[str, str]:
    good = _report_of(FakeNvml("dgx1"), tmp_path / "good.json")
    text = open(good, encoding="utf-8").read()
    report = json.loads(text)
    cases = {"truncated.json": text[: len(text) // 2], "other.json": json.dumps({"schema": "ddptop-doctor/1"}),
             "list.json": "[1, 2]", "empty.json": ""}
    no_pci = copy.deepcopy(report)
    del no_pci["gpus"][2]["pci"]
    bad_error = copy.deepcopy(report)
    bad_error["gpus"][1]["nvlinks"][0]["state"] = {"error": "NVML_ERROR_NOPE"}
    escaping = copy.deepcopy(report)
    escaping["nics"][0]["path"] = ["..", "..", "etc"]
    for name, data in (("no-pci.json", no_pci), ("bad-error.json", bad_error), ("escaping.json", escaping)):
        cases[name] = json.dumps(data)
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    return {name: str(tmp_path / name) for name in cases}


def test_a_damaged_or_unknown_report_is_refused_in_one_line(tmp_path):
    expected = {"truncated.json": "damaged JSON", "other.json": "not a ddptop doctor report (schema 'ddptop-doctor/1'",
                "list.json": "not a ddptop doctor report", "empty.json": "damaged JSON",
                "no-pci.json": "gpus[2]: no pci", "bad-error.json": "gpus[1].nvlinks[0].state.error: 'NVML_ERROR_NOPE'",
                "escaping.json": "nics[0].path: must be the sysfs path's parts"}
    for name, path in _damaged(tmp_path).items():
        done = ddptop("topo", env={"DDPTOP_FAKE_NVML": path})
        assert done.returncode == 2 and done.stdout == "", (name, done.stdout)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (name, done.stderr)
        assert done.stderr.startswith(f"ddptop: error: {path}: ") and expected[name] in done.stderr, done.stderr
    missing = ddptop("gpus", env={"DDPTOP_FAKE_NVML": str(tmp_path / "nowhere.json")})
    assert missing.returncode == 2 and missing.stderr.strip().endswith("no such report file")


def test_any_one_part_of_a_report_damaged_is_refused_or_replayed_never_a_traceback(tmp_path):
    """Every value of a real report, one at a time, removed or replaced by a value of another kind."""
    path = _report_of(FakeNvml("a100-mig"), tmp_path / "good.json")
    report = json.loads(open(path, encoding="utf-8").read())

    def places(value, at=()):
        yield at
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in children:
            yield from places(child, at + (key,))

    tried = 0
    for place in list(places(report))[1:]:
        for change in ("remove", None, "text", -1, [], {}):
            damaged = copy.deepcopy(report)
            parent = damaged
            for key in place[:-1]:
                parent = parent[key]
            if change == "remove":
                del parent[place[-1]]
            else:
                parent[place[-1]] = change
            (tmp_path / "damaged.json").write_text(json.dumps(damaged))
            try:
                load_profile(str(tmp_path / "damaged.json"))
            except ProfileError as exc:
                assert "\n" not in str(exc)
            tried += 1
    assert tried > 500


def test_a_report_that_cannot_be_written_is_one_line_before_anything_runs(tmp_path):
    for target in (tmp_path / "missing" / "report.json", tmp_path):
        done = ddptop("doctor", "--quick", "--out", str(tmp_path), "--report", str(target),
                      env={"DDPTOP_FAKE_NVML": "dgx1", "PATH": without_smi_path()})
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stdout + done.stderr
        assert "--report" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "doctor.json").exists()


def test_replay_is_chosen_by_the_json_suffix_and_answers_as_a_simulated_node(tmp_path):
    path = _report_of(FakeNvml("hgx-h100"), tmp_path / "h.json")
    node = replay_node(path)
    assert isinstance(node, ReplayNvml) and node.IS_FAKE and node.REPLAYS
    node.nvmlInit()
    handle = node.nvmlDeviceGetHandleByIndex(3)
    assert node.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3 (FAKE)"
    with pytest.raises(node.NVMLError_NotSupported):
        node.nvmlDeviceGetNumaNodeId(handle)
    assert node.nvmlDeviceGetPciInfo(handle).busId == FakeNvml("hgx-h100").bus_ids[3]


def _matrix(text: str) -> list[str]:
    """The lines from the matrix's header to the end of the NIC legend."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    end = lines.index("NIC Legend:") + 2
    while end < len(lines) and lines[end].startswith("  NIC"):
        end += 1
    return lines[start:end]


def test_a_real_machines_report_replays_the_same_matrix_under_the_fake_label(tmp_path):
    """A report from a real driver has no FAKE line and that machine's CPUs after the matrix: the replay adds the
    FAKE line and this machine's CPUs around the same matrix, legend and NIC legend."""
    fake = FakeNvml("dgx-a100")
    report = {"schema": REPORT_SCHEMA, **read_driver(fake)}
    report["nvml"]["simulated"] = False
    real = read_topology(fake)
    real.fake = False
    report["ddptop"] = {"topo": format_matrix(real)}
    path = tmp_path / "real.json"
    path.write_text(json.dumps(report))
    replayed = format_matrix(read_topology(replay_node(str(path))))
    assert replayed.startswith("FAKE: simulated node") and not report["ddptop"]["topo"].startswith("FAKE")
    assert _matrix(replayed) == _matrix(report["ddptop"]["topo"]) and len(_matrix(replayed)) > 30


def test_a_nic_on_no_pci_path_is_replayed_with_na_cells(tmp_path):
    """A NIC that machine's sysfs placed on no PCI path (a soft RoCE device) is listed with N/A cells, as there."""
    fake = FakeNvml("pcie-4gpu")
    report = {"schema": REPORT_SCHEMA, **read_driver(fake)}
    report["nics"].append({"name": "rxe0", "bdf": None, "path": None, "numa_node": None})
    path = tmp_path / "rxe.json"
    path.write_text(json.dumps(report))
    topo = read_topology(replay_node(str(path)))
    assert topo.nics[-1] == "rxe0" and {topo.matrix["rxe0"][gpu] for gpu in topo.gpus} == {"N/A"}
    assert f"  NIC{len(topo.nics) - 1}: rxe0" in format_matrix(topo).splitlines()


def test_a_container_view_replays_its_refused_gpus_and_other_jobs_processes(tmp_path):
    """dgx-a100 seen from a job allowed GPUs 2 and 3: six handles refused (NO_PERMISSION), two processes of other
    jobs (one whose memory NVML cannot tell); the replay refuses the same six and lists the same processes."""
    from ddptop.telemetry.gpus_command import take_snapshot

    fake = FakeNvml("container", steady=True)
    path = _report_of(fake, tmp_path / "container.json")
    replayed = replay_node(path)
    assert format_matrix(read_topology(replayed)) == json.loads(open(path, encoding="utf-8").read())["ddptop"]["topo"]
    before, after = take_snapshot(0.01, fake), take_snapshot(0.01, replayed)
    assert [(p["gpu"], p["pid"], p.get("gpu_memory")) for p in after["processes"]] == \
        [(p["gpu"], p["pid"], p.get("gpu_memory")) for p in before["processes"]] == \
        [(2, 3999972, None), (3, 3999971, 20 << 30)]
    assert [g.get("inaccessible") for g in after["gpus"]] == [g.get("inaccessible") for g in before["gpus"]]
    assert sum(1 for g in after["gpus"] if g.get("inaccessible")) == 6


def test_p2p_status_the_driver_gave_is_replayed(tmp_path):
    """No profile says what P2P a platform allows, so a simulated node answers nvmlDeviceGetP2PStatus as a driver
    without it; a report's own answers (here written in: OK over NVLink, CHIPSET_NOT_SUPPORTED for atomics) are
    replayed as given."""
    fake = FakeNvml("dgx1")
    path = _report_of(fake, tmp_path / "p2p.json")
    report = json.loads(open(path, encoding="utf-8").read())
    assert report["pairs"][0]["p2p_status"]["nvlink"] == {"error": "NVML_ERROR_FUNCTION_NOT_FOUND"}
    for pair in report["pairs"]:
        pair["p2p_status"] = {"nvlink": {"value": 0}, "atomics": {"value": 2}, "read": {"error": "NVML_ERROR_UNKNOWN"}}
    (tmp_path / "p2p.json").write_text(json.dumps(report))
    node = replay_node(path)
    node.nvmlInit()
    first, second = node.nvmlDeviceGetHandleByIndex(0), node.nvmlDeviceGetHandleByIndex(3)
    assert node.nvmlDeviceGetP2PStatus(first, second, 2) == 0 and node.nvmlDeviceGetP2PStatus(first, second, 3) == 2
    with pytest.raises(node.NVMLError_Unknown):
        node.nvmlDeviceGetP2PStatus(first, second, 0)
    again = read_driver(node)
    assert again["pairs"][0]["p2p_status"] == {**{n: {"error": "NVML_ERROR_INVALID_ARGUMENT"} for n in ("write", "pci")},
                                               "nvlink": {"value": 0}, "atomics": {"value": 2},
                                               "read": {"error": "NVML_ERROR_UNKNOWN"}}

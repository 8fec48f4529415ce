"""A single-node run listens on loopback only: torchrun's rendezvous store and the ranks' gloo connections.

torch's TCPStore listens on every interface whatever host it is given (checked first, so this test shows
what it guards against); the launch's agent hands it a socket bound to 127.0.0.1 instead
(``bench_kernels.loopback_agent``). The test watches every process of a real `ddptop run` while it runs.
"""

import datetime
import ipaddress
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO, _ddptop_env

pytestmark = pytest.mark.slow


def test_torchs_store_alone_listens_on_every_interface():
    dist = pytest.importorskip("torch.distributed")
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=5))
    try:
        ours = [c.laddr.ip for c in psutil.Process().net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == store.port]
        assert ours and not any(ipaddress.ip_address(ip).is_loopback for ip in ours)  # '::' or '0.0.0.0'
    finally:
        del store


def _listening(root: psutil.Process) -> set[tuple[str, int, str]]:
    found = set()
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for proc in tree:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((conn.laddr.ip, conn.laddr.port, " ".join(proc.cmdline()[:4])))
        except psutil.Error:
            continue
    return found


def test_a_single_node_run_listens_on_loopback_only(tmp_path):
    command = [sys.executable, "-m", "ddptop", "run", "--headless", "--out", str(tmp_path / "run"),
               "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10",
               "--batch-sizes", "2", "--world-sizes", "2", "--no-baseline", "--warmup", "1", "--iters", "400",
               "--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0"]
    process = subprocess.Popen(command, cwd=REPO, env=_ddptop_env(None), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int, str]] = set()
    root = psutil.Process(process.pid)
    deadline = time.monotonic() + 240
    while process.poll() is None and time.monotonic() < deadline:
        seen |= _listening(root)
        time.sleep(0.2)
    _, errors = process.communicate(timeout=60)
    assert process.returncode == 0, errors
    wide = [s for s in seen if not ipaddress.ip_address(s[0]).is_loopback]
    assert wide == [], f"listening beyond loopback: {wide}"
    stores = [s for s in seen if "loopback_agent" in s[2]]
    assert stores, f"the rendezvous store was never seen listening: {sorted(seen)}"

"""A launch on one machine listens on loopback only: torchrun's rendezvous store and the ranks' sockets.

torch's TCPStore listens on every interface whatever host it is given (checked first, so these tests show
what they guard against); the agent that hosts the store hands it a socket bound to 127.0.0.1 instead
(``bench_kernels.loopback_agent``), which torchrun's static rendezvous shares. The slow test watches every
process of a real `ddptop run` (the agent and its ranks) while it runs; tests/test_multinode.py watches its
two nodes on this machine the same way.
"""

import datetime
import ipaddress
import subprocess
import sys
import time

import psutil
import pytest

from ddptop.run.launcher import NodePlacement, TorchrunLaunch, free_loopback_port
from tests.conftest import REPO, _ddptop_env

RUN = ["--headless", "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10",
       "--batch-sizes", "2", "--no-baseline", "--warmup", "1", "--comm-iters", "0", "--no-collectives",
       "--telemetry-interval", "0", "--launches", "1", "--no-plots"]  # one launch is all the sockets need


def _listening_on(port: int) -> list[str]:
    return [c.laddr.ip for c in psutil.Process().net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def test_torchs_store_alone_listens_on_every_interface():
    dist = pytest.importorskip("torch.distributed")
    for libuv in (True, False):
        store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=5), use_libuv=libuv)
        try:
            ours = _listening_on(store.port)
            assert ours and not any(ipaddress.ip_address(ip).is_loopback for ip in ours)  # '::' or '0.0.0.0'
        finally:
            del store


def test_torchruns_static_rendezvous_shares_the_loopback_store():
    """What the loopback agent relies on, with the installed torch: the store takes the bound socket, and the
    static rendezvous torchrun creates for --master-addr/--master-port (multi_tenant) reuses that server."""
    pytest.importorskip("torch.distributed")
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    from bench_kernels.loopback_agent import listen_on_loopback

    port = free_loopback_port()
    kept = listen_on_loopback(port)
    assert kept is not None, "this torch's TCPStore cannot be given a bound socket"
    store, listener = kept
    listener.detach()  # the store closes the socket when it goes
    info = StaticTCPRendezvous("127.0.0.1", port, 0, 1, "launch", 10).next_rendezvous()
    info.store.set("key", "value")
    assert store.get("launch/key") == b"value"  # one server, the loopback one
    assert _listening_on(port) == ["127.0.0.1"]


def test_the_agents_on_one_machine_keep_to_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    path = str(tmp_path)
    one = TorchrunLaunch(path, None, 2)
    assert one.command(1234)[2] == "bench_kernels.loopback_agent" and "--master-addr=127.0.0.1" in one.command(1234)
    env = one.environment()
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"
    # several nodes on this machine (a rehearsal): node 0 hosts the store on loopback, every agent meets there
    here = [TorchrunLaunch(path, None, 1, placement=NodePlacement(2, rank, "localhost", 29400, 60, True))
            for rank in (0, 1)]
    assert [launch.command(0)[2] for launch in here] == ["bench_kernels.loopback_agent", "torch.distributed.run"]
    assert all("--master-addr=127.0.0.1" in launch.command(0) for launch in here)
    assert here[1].environment()["NCCL_SOCKET_IFNAME"] == "lo"
    # nodes on several machines: torchrun itself, at the leader's address; the ranks use the node's interfaces
    apart = TorchrunLaunch(path, None, 1, placement=NodePlacement(2, 0, "node0", 29400, 60, False))
    assert apart.command(0)[2] == "torch.distributed.run" and "--master-addr=node0" in apart.command(0)
    assert "NCCL_SOCKET_IFNAME" not in apart.environment()
    # a user's own choice wins
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth7")
    assert one.environment()["NCCL_SOCKET_IFNAME"] == "eth7"


def _listening(roots: list[psutil.Process]) -> set[tuple[str, int, str, int]]:
    """(address, port, command, which root's tree) of every listening socket."""
    found = set()
    for which, root in enumerate(roots):
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in tree:
            try:
                for conn in proc.net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        found.add((conn.laddr.ip, conn.laddr.port, " ".join(proc.cmdline()[:4]), which))
            except psutil.Error:
                continue
    return found


def watch_listening(processes: list[subprocess.Popen], timeout: float = 240) -> set[tuple[str, int, str, int]]:
    """Every listening socket of the processes' trees, looked at every 0.2 s until they have all ended."""
    roots = [psutil.Process(p.pid) for p in processes]
    seen: set[tuple[str, int, str, int]] = set()
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        seen |= _listening(roots)
        time.sleep(0.2)
    return seen


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddptop", "run", *args], cwd=REPO, env=_ddptop_env(None),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def assert_loopback_only(seen: set[tuple[str, int, str, int]]) -> None:
    wide = [s for s in seen if not ipaddress.ip_address(s[0]).is_loopback]
    assert wide == [], f"listening beyond loopback: {wide}"
    stores = [s for s in seen if "loopback_agent" in s[2]]
    assert stores, f"the rendezvous store was never seen listening: {sorted(seen)}"


@pytest.mark.slow
def test_a_single_node_run_listens_on_loopback_only(tmp_path):
    process = _start("--out", str(tmp_path / "run"), "--world-sizes", "2", "--iters", "400", *RUN)
    try:
        seen = watch_listening([process])
        _, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, errors
    assert_loopback_only(seen)

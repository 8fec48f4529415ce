"""rendezvous store: where a real single-node launch's store (and anything else of it) listens."""

from __future__ import annotations

import ipaddress

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.launch import Launched
from ddptop.doctor.result import OK, SKIPPED, WARN, Check, listed

NAME = "rendezvous store"


def run(context: DoctorContext) -> Check:
    if context.quick:
        return check_store(None, "--quick: nothing is launched")
    return check_store(context.shared_launch.launched)


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_store(launched: Launched | None, skipped: str = "") -> Check:
    if launched is None:
        return Check(NAME, SKIPPED, skipped)
    data = {"listeners": launched.listeners, "launch_exit": launched.returncode}
    store = sorted({f"{s['ip']}:{s['port']}" for s in launched.listeners if s["role"] == "store"})
    wide = [s for s in launched.listeners if not _is_loopback(s["ip"])]
    if wide:
        shown = [f"{s['role']} on {s['ip']}:{s['port']}" for s in wide]
        return Check(NAME, WARN, f"a single-node launch listens beyond loopback: {listed(shown)}: reachable "
                                 "from the network while it runs", data)
    if not store:
        why = f"the launch failed: {launched.error}" if launched.returncode else "it ended before it was seen"
        return Check(NAME, SKIPPED, f"no listening store seen during a single-node launch ({why})", data)
    others = len(launched.listeners) - len(store)
    rest = f"; {others} other socket(s) of the launch on loopback too" if others else ""
    return Check(NAME, OK, f"a single-node launch's store listened on {', '.join(store)} only{rest}", data)

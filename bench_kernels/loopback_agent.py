"""torchrun for a launch on one machine, its rendezvous store listening on loopback only.

    python -m bench_kernels.loopback_agent <torchrun's arguments, --master-addr=127.0.0.1 --master-port=P>

torch's TCPStore server listens on the wildcard address whatever host it is given (a store created for
127.0.0.1 listens on ``::``), so during a run anyone who can reach the node could reach the store, an
unauthenticated key-value service the ranks trust. TCPStore also takes a socket already bound
(``master_listen_fd``), and the static rendezvous that torchrun's ``--master-addr``/``--master-port`` select
creates its store with ``multi_tenant=True``, which reuses a server this process already runs on that port
(torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py; the workers connect to the agent's store as
clients, TORCHELASTIC_USE_AGENT_STORE). So this binds 127.0.0.1:P, starts the store on that socket, then
runs torchrun's own ``main`` unchanged. A torch whose TCPStore lacks either keyword gets plain torchrun and a
line in agent.log saying the store listens on every interface.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import sys

LOOPBACK = "127.0.0.1"


def _master_port(argv: list[str]) -> int | None:
    for position, arg in enumerate(argv):
        if arg.startswith("--master-port=") or arg.startswith("--master_port="):
            return int(arg.split("=", 1)[1])
        if arg in ("--master-port", "--master_port") and position + 1 < len(argv):
            return int(argv[position + 1])
    return None


def listen_on_loopback(port: int) -> tuple[object, socket.socket] | None:
    """A TCPStore server on 127.0.0.1:``port`` that torchrun's rendezvous will share; None where this torch
    cannot be given a bound socket."""
    import inspect

    import torch.distributed as dist

    try:
        keywords = inspect.signature(dist.TCPStore.__init__).parameters
    except (TypeError, ValueError):  # a pybind signature inspect cannot read: read its docstring
        keywords = dist.TCPStore.__init__.__doc__ or ""
    if "master_listen_fd" not in keywords or "multi_tenant" not in keywords:
        return None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, port))
    listener.listen(128)
    options = {"wait_for_workers": False, "multi_tenant": True, "master_listen_fd": listener.fileno()}
    # torch 2.4 to 2.7: the libuv server, the default, refuses a listen fd (NotImplementedError, raised before
    # the socket is touched); the legacy server takes one in every version that has the keyword
    for backend in ({}, {"use_libuv": False}):
        try:
            store = dist.TCPStore(LOOPBACK, port, None, True, datetime.timedelta(seconds=60), **options, **backend)
        except NotImplementedError:
            continue
        except Exception:
            break
        listener.detach()  # the store owns the socket now and closes it when it goes
        return store, listener
    listener.close()
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    port = _master_port(argv)
    try:
        kept = listen_on_loopback(port) if port else None  # kept alive while torchrun runs
    except OSError:  # the port was taken between ddptop's choice and this bind: torchrun reports it too
        kept = None
    if kept is None:
        print("ddptop: this torch's TCPStore cannot be given a bound socket: the rendezvous store listens on "
              "every interface during this launch", file=sys.stderr, flush=True)
    from torch.distributed.run import main as torchrun

    torchrun(argv)
    del kept
    return 0


def exit_without_teardown(code: int) -> None:
    """Leave once torchrun has returned, its ranks ended and its rendezvous shut down, without the interpreter's
    teardown of torch (0.4 s here, by which the sweep's next launch would wait). A failed launch raises out of
    torchrun's main instead and exits the usual way, with its traceback."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say there anyway
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())

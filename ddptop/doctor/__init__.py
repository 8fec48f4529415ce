"""``ddptop doctor``: what a user checks on a new node before trusting a sweep there.

Each check is ok, warn, fail or skipped, with one line saying why; the lines are printed as the checks end
and saved as doctor.json. NVML is read through ddptop's own door (``ddptop.telemetry``: ``nvml``,
``inventory``, ``topology``); what torch knows comes from a subprocess (``bench_kernels.doctor_probe``), since
this process never imports torch; what a launch does is watched from outside, on a real ``ddptop run``.
What does not apply (no GPU, no ``nvidia-smi``, no nccl-tests) is skipped with the reason, never an error.

    NVML                        ddptop's NVML: GPUs, driver, GPUs it may not open
    nvidia-smi vs NVML          ``nvidia-smi --query-gpu``: the same GPUs, indices, names, memory, PCI bus IDs
    topo -m vs ddptop topo      ``nvidia-smi topo -m`` against ``ddptop topo``, cell by cell
    torch / CUDA / NCCL         versions; torchvision importable; a CUDA torch where NVML sees GPUs
    CUDA order vs NVML order    cuda:k against NVML's numbering (PCI bus order)
    P2P access                  peer access between CUDA devices, against the NVLinks NVML reports
    rendezvous store            where a real single-node launch's store (and anything else of it) listens
    kernel vs plain DDP loop    ddptop's kernel against a plain torch DDP loop, same configuration, median steps
    nccl-tests all_reduce_perf  one 64 MiB allreduce, against ddptop's collective benchmark on 2+ GPUs

Each check is a module of ``ddptop.doctor.checks`` with ``NAME`` and ``run(context: DoctorContext) -> Check``,
listed in order in ``checks.CHECKS``; ``context`` finds what they share once (NVML's view, torch's answers,
the launch), ``output`` makes the lines and doctor.json from the ``Check`` results, ``parsing`` reads what
nvidia-smi and nccl-tests print. This module is the public face.

``--report FILE`` (``driver_report``) also writes every answer ddptop read from the driver, nvidia-smi's
``topo -m`` and ddptop's own ``topo`` into one JSON file, which ``DDPTOP_FAKE_NVML=FILE`` replays as a
simulated node.
"""

from ddptop.doctor.checks import CHECK_NAMES, CHECKS, DoctorCheck
from ddptop.doctor.checks.device_order import check_device_order
from ddptop.doctor.checks.peer_access import check_peer_access
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlGpu, NvmlView, read_nvml
from ddptop.doctor.output import DOCTOR_FILE, SCHEMA, DoctorError, line, prepare_out, save, table
from ddptop.doctor.parsing import parse_all_reduce_perf, parse_query_gpu, parse_topo_matrix
from ddptop.doctor.result import FAIL, OK, SKIPPED, STATUSES, WARN, Check
from ddptop.doctor.runner import run_doctor

__all__ = [
    "CHECKS", "CHECK_NAMES", "DOCTOR_FILE", "FAIL", "OK", "SCHEMA", "SKIPPED", "STATUSES", "WARN",
    "Check", "DoctorCheck", "DoctorContext", "DoctorError", "NvmlGpu", "NvmlView",
    "check_device_order", "check_peer_access", "line", "parse_all_reduce_perf", "parse_query_gpu",
    "parse_topo_matrix", "prepare_out", "read_nvml", "run_doctor", "save", "table",
]

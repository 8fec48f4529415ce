"""topo -m vs ddptop topo: ``nvidia-smi topo -m`` against ``ddptop topo``, the words each prints, cell by cell."""

from __future__ import annotations

from ddptop.doctor.commands import run_command
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.parsing import last_line, parse_topo_matrix
from ddptop.doctor.result import FAIL, OK, SKIPPED, WARN, Check, listed
from ddptop.telemetry.topology import format_matrix, read_topology

NAME = "topo -m vs ddptop topo"


def run(context: DoctorContext) -> Check:
    return check_topology(context.smi)


def check_topology(smi: str | None) -> Check:
    if smi is None:
        return Check(NAME, SKIPPED, "nvidia-smi is not on PATH")
    done = run_command([smi, "topo", "-m"], 60)
    theirs = parse_topo_matrix(done.stdout) if done.returncode == 0 else {}
    if not theirs:
        return Check(NAME, SKIPPED, f"nvidia-smi topo -m printed no matrix ({last_line(done.stderr or done.stdout)})")
    topo = read_topology()
    ours = parse_topo_matrix(format_matrix(topo))
    if not ours:
        return Check(NAME, WARN, f"ddptop topo shows no matrix ({topo.problem or 'no GPU'}); nvidia-smi shows "
                                 f"{len(theirs)} cells")
    mismatches = [f"{row}/{column}: nvidia-smi {word}, ddptop {ours.get((row, column), 'nothing')}"
                  for (row, column), word in theirs.items() if ours.get((row, column)) != word]
    mismatches += [f"{row}/{column}: nvidia-smi nothing, ddptop {word}"
                   for (row, column), word in ours.items() if (row, column) not in theirs]
    data = {"cells": len(theirs), "mismatches": mismatches}
    if mismatches:
        return Check(NAME, FAIL, f"{len(mismatches)} of {len(theirs)} cells differ: {listed(mismatches)}", data)
    return Check(NAME, OK, f"{len(theirs)} cells agree", data)

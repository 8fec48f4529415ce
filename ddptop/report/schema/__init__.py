"""The scaling summary as typed records: what ``summary.json`` holds, section by section.

``ddptop.report.build`` makes a ``Summary``; ``ddptop.report.store`` alone turns it into ``summary.json``
and back (upgrading older versions first); the tables, the diff, the plots, the summary screen and the live
scaling figures read its attributes, so a mistyped name is found by the type checker, not by a user.

Every record keeps what it was read from: keys this ddptop does not model are carried through untouched,
and the keys are written back in the order they were read, so a summary read and written again is the same
document byte for byte (``tests/test_summary_model.py``). A record made in code writes its fields in the
order they are declared, which is the order ``build`` has always written them in.

Parts that another module owns are kept as that module's JSON: the environment's free-form details, the
plan (``ddptop.run.plan_records.Plan.to_json``) beyond the fields read here, the topology
(``ddptop.telemetry.topology.Topology.from_json``) and the telemetry file's device list.

The records are declared by topic: ``config`` (one configuration), ``trace`` (its profiler trace, the
analysis's own records named here), ``tables`` (figures over several configurations), ``threads`` (the CPU's
thread curve, core budget and CPU against GPU) and ``run`` (the run as
a whole, its plan's fields and the ``Summary``); the base ``Record`` and the ``Estimate`` are
``ddptop.records``'s, shared with the analysis. Every name is importable from here.
"""

from __future__ import annotations

from ddptop.records import (SchemaError, Record, Estimate, value_of, ci_of, reading_older, estimates_in, Interval, BOOTSTRAP, OVER_LAUNCHES, MODEL, MOMENTS, AS_RECORDED)
from ddptop.report.schema.config import (Config, StepFigures, Percentiles, RankSpread, LaunchUnit, Communication, DdpLogging, Buckets, Achieved, WindowLoad, RankLoad, GpuIdle, Validity, Straggler, StragglerEvidence, Unconfirmed, ScriptSeen, WrapperSeen, GradSync, RankShare, WaitStraggler, DataWait, StepLessWait, Flops, Verdict)
from ddptop.report.schema.trace import (Trace, TraceFile, TraceBreakdown, TraceSpread, TraceKernel, TraceCollective, TraceGpuWork)
from ddptop.report.schema.tables import (ScalingTable, ScalingRow, Amdahl, Epoch, Projection, ProjectionPoint, BatchTable, BatchRow, CollectiveTable, CollectiveRow, DpVsDdpRow, TuneTable, TuneRow, StrategyTable, StrategyRow, FrontierPoint, Ceiling, CompileCost, NcclChoice)
from ddptop.report.schema.threads import (ThreadTable, ThreadRow, CoreBudget, BudgetCell, DevicesCompared, DeviceSide)
from ddptop.report.schema.run import (Summary, Uncertainty, LaunchVariance, Overhead, LaunchRecord, TelemetrySource, NodeRecord, NodeLaunch, Environment, PlanRecord)

__all__ = [
    "SchemaError",
    "Record",
    "Estimate",
    "value_of",
    "ci_of",
    "reading_older",
    "estimates_in",
    "Interval",
    "BOOTSTRAP",
    "OVER_LAUNCHES",
    "MODEL",
    "MOMENTS",
    "AS_RECORDED",
    "Config",
    "StepFigures",
    "Percentiles",
    "RankSpread",
    "LaunchUnit",
    "Communication",
    "DdpLogging",
    "Buckets",
    "Achieved",
    "WindowLoad",
    "RankLoad",
    "GpuIdle",
    "Validity",
    "Straggler",
    "StragglerEvidence",
    "Unconfirmed",
    "ScriptSeen",
    "WrapperSeen",
    "GradSync",
    "RankShare",
    "WaitStraggler",
    "DataWait",
    "StepLessWait",
    "Flops",
    "Verdict",
    "Trace",
    "TraceFile",
    "TraceBreakdown",
    "TraceSpread",
    "TraceKernel",
    "TraceCollective",
    "TraceGpuWork",
    "ScalingTable",
    "ScalingRow",
    "Amdahl",
    "Epoch",
    "Projection",
    "ProjectionPoint",
    "BatchTable",
    "BatchRow",
    "CollectiveTable",
    "CollectiveRow",
    "DpVsDdpRow",
    "TuneTable",
    "TuneRow",
    "StrategyTable",
    "StrategyRow",
    "FrontierPoint",
    "Ceiling",
    "CompileCost",
    "NcclChoice",
    "ThreadTable",
    "ThreadRow",
    "CoreBudget",
    "BudgetCell",
    "DevicesCompared",
    "DeviceSide",
    "Summary",
    "Uncertainty",
    "LaunchVariance",
    "Overhead",
    "LaunchRecord",
    "TelemetrySource",
    "NodeRecord",
    "NodeLaunch",
    "Environment",
    "PlanRecord",
]

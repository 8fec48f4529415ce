"""A configuration's profiler trace as the summary holds it: its files, what they cost, and the breakdown of
every kept step of every rank. The records are declared once, where the trace is broken down
(``ddptop.analysis.traces``, ``ddptop.analysis.trace_breakdown``); the summary names them here."""

from __future__ import annotations

from ddptop.analysis.trace_breakdown import CollectiveTotal, GpuWork, KernelTotal
from ddptop.analysis.traces import CombinedBreakdown, ConfigTrace, Spread, TraceFile

Trace = ConfigTrace
TraceBreakdown = CombinedBreakdown
TraceSpread = Spread
TraceKernel = KernelTotal
TraceCollective = CollectiveTotal
TraceGpuWork = GpuWork

__all__ = ["Trace", "TraceBreakdown", "TraceSpread", "TraceKernel", "TraceCollective", "TraceGpuWork", "TraceFile"]

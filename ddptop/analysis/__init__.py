"""What the measurements mean, as plain Python on plain numbers: no Textual, no torch, no session.

- ``stats`` (percentiles, step statistics), ``uncertainty`` (the block bootstrap and verdicts), ``step_change``
  (a change in step time: slower, faster, equivalent or within noise), ``launches`` (the launch-to-launch
  level of every interval), ``intervals`` (the intervals of a summary's figures);
- ``scaling`` (the scaling tables, live and saved), ``formulas`` (ring volume, Amdahl, Karp-Flatt, cost),
  ``projection`` (beyond this node), ``communication`` (compute against communication);
- ``compute`` and ``datasheet_peaks`` (FLOP/s, MFU, datasheet peaks), ``links`` (bus bandwidth against link
  peaks), ``step_bound`` (what bounds a step), ``stragglers`` (the slow rank in lockstep), ``synthetic``
  (sweeps with a known truth, for the tests and benchmarks that check the intervals), ``tokens`` (tokens/s of
  the transformer models), ``job_use`` (what the run used at its peak of what the job was given).

Import the modules themselves; this package imports none of them, so a caller that needs ``stats`` does
not load numpy through the others.
"""

__all__ = ["communication", "compute", "datasheet_peaks", "formulas", "intervals", "job_use", "launches", "links",
           "projection", "scaling", "stats", "step_bound", "step_change", "stragglers", "synthetic", "tokens",
           "uncertainty"]

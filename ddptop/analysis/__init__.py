"""What the measurements mean, as plain Python on plain numbers: no Textual, no torch, no session.

- ``stats`` (percentiles, step statistics), ``uncertainty`` (the block bootstrap and verdicts), ``step_change``
  (a change in step time: slower, faster, equivalent or within noise), ``launches`` (the launch-to-launch
  level of every interval; ``launch_spread`` its record), ``intervals`` (the intervals of a summary's figures);
- ``scaling`` (the scaling tables, live and saved), ``formulas`` (ring volume, Amdahl, Karp-Flatt, cost),
  ``projection`` (beyond this node), ``communication`` (compute against communication);
- ``compute`` and ``datasheet_peaks`` (FLOP/s, MFU, datasheet peaks), ``links`` (bus bandwidth against link
  peaks), ``step_bound`` (what bounds a step), ``stragglers`` (the slow rank in lockstep), ``synthetic``
  (sweeps with a known truth, for the tests and benchmarks that check the intervals), ``tokens`` (tokens/s of
  the transformer models), ``job_use`` (what the run used at its peak of what the job was given);
- ``figures`` (a figure and its interval from one computation of its formula), ``threads`` (the thread curve,
  the core budget, CPU against GPU), ``strategy_figures`` (DDP, ZeRO-1, FSDP2 compared), ``tuning`` (tune's answer),
  ``noise_scale`` (the gradient noise scale and the time-to-loss speedup it predicts; ``gradient_noise`` its
  record, what the live view reads of it, without numpy);
- ``traces``, ``trace_file`` and ``trace_breakdown`` (a profiler trace broken down); ``script_steps``,
  ``script_sync``, ``script_figures``, ``script_tries`` and ``script_patch`` (a user's script: its steps, its
  synchronisation, its figures, the tries its run calls for, and the change at the user's line).

Import the modules themselves; this package imports none of them, so a caller that needs ``stats`` does
not load numpy through the others.
"""

__all__ = ["communication", "compute", "datasheet_peaks", "figures", "formulas", "gradient_noise", "intervals", "job_use",
           "launch_spread", "launches", "links", "noise_scale", "projection", "scaling", "script_figures",
           "script_patch", "script_steps", "script_sync", "script_tries", "stats", "step_bound", "step_change",
           "stragglers", "strategy_figures", "synthetic", "threads", "tokens", "trace_breakdown", "trace_file",
           "traces", "tuning", "uncertainty"]

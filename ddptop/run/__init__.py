"""Running a sweep: what to run, how it is launched, and what its ranks said while it ran.

- the plan: ``options`` (every ``ddptop run`` option, one table), ``plan`` (options to a ``Plan``, TOML
  files), ``plan_records`` (``Plan``, ``ConfigSpec``, ``Launch``: what runs in which launch);
- launching: ``sweep`` (launches in order, the hang watch, one more launch for a disturbed one),
  ``launcher`` (one torchrun subprocess), ``binding`` (the CPUs each rank gets), ``cluster`` and
  ``follower`` (several nodes), ``environment`` (what the node and its software are), ``nccl_debug`` (NCCL's
  TUNING log turned on in a tune's launches), ``signals``;
- reading it back: ``session`` (the ranks' events as per-configuration state), ``snapshot`` (what a view
  shows of it, frozen), ``eta`` (time left), ``rundir`` (the run directory and its launches' folders made,
  torchrun's logs read).

``ddptop.report`` (a session's summary) sits above this package, and ``ddptop.live`` above both (a run
driven to its summary: ``LiveRun``, ``RecordedRun``), under ``ddptop.control`` and the frontends;
``ddptop.analysis``, ``ddptop.telemetry`` and ``ddptop.protocol`` are below it (the import-linter layers in
pyproject.toml). Importing it loads neither torch nor Textual.
"""

__all__ = ["binding", "cluster", "config_state", "environment", "eta", "failure_reasons", "follower", "hang_watch",
           "launcher", "nccl_debug", "options", "plan", "plan_devices", "plan_file", "plan_measurement",
           "plan_models", "plan_records", "rundir", "script_tune", "session", "signals", "snapshot", "sweep",
           "workloads"]

"""A run as a view drives it, from its first file to its summary: ``live_run`` (``LiveRun``: a sweep this
process runs; ``create_live_run`` puts plan, run directory, session, sweep and telemetry together),
``recorded_run`` (``RecordedRun``: a run directory another process writes or wrote, ``ddptop watch`` and
``view``), ``live_scaling`` (speedup and efficiency so far, as the summary's ``ScalingRow``) and
``live_validity`` (whether the node was quiet: "so far", then the summary's own verdict).

Each of them ends in a summary, so this package sits above ``ddptop.report`` (which builds a summary from a
``ddptop.run`` session) and below ``ddptop.control`` and the frontends (the import-linter layers in
pyproject.toml). Importing its modules loads neither torch, Textual nor numpy: the summary's statistics load
when one is built.
"""

__all__ = ["live_run", "live_scaling", "live_validity", "recorded_run"]

"""Summaries of a run: ``build`` (a session's summary, or ``load_target``: a run's saved or rebuilt one),
``store`` (saving and loading summary.json, .md and .csv, the schema and its upgrade, ``keys``),
``sections`` (the report's parts, in order) whose ``*_tables`` modules (one per kind of part, sharing
``cells``) build neutral ``blocks`` that one writer renders for the terminal and one for Markdown,
``csv_table`` (summary.csv), ``diff`` (two summaries compared), ``plots`` and ``quiet`` (was a configuration
measured on a quiet node: the rule the summary and the live view share). ``schema`` holds the summary's typed
records; ``consistency`` (with ``consistency_figures`` and ``consistency_verdicts``) finds where a summary
contradicts itself and ``outputs`` where one cannot be rendered; ``chart_data`` is what a chart is handed.
"""

__all__ = ["batch_tables", "blocks", "build", "cells", "chart_data", "communication_tables", "compute_tables",
           "consistency", "consistency_figures", "consistency_verdicts", "csv_table", "diff", "environment_tables",
           "keys", "launch_tables", "load_tables", "outputs", "plots", "problem_tables", "quiet", "scaling_tables",
           "schema", "script_tables", "sections", "store", "strategy_tables", "thread_tables", "trace_tables",
           "tuning_tables"]

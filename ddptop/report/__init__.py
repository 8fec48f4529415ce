"""Summaries of a run: ``build`` (a session's summary, or ``load_target``: a run's saved or rebuilt one),
``store`` (saving and loading summary.json, .md and .csv, the schema and its upgrade, ``keys``),
``sections`` (the report's parts, in order) whose ``tables`` build neutral ``blocks`` that one writer renders
for the terminal and one for Markdown, ``diff`` (two summaries compared) and ``plots``.
"""

__all__ = ["blocks", "build", "diff", "keys", "plots", "sections", "store", "tables"]

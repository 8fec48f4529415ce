"""Summaries of a run: building, saving, loading, and rendering them as tables."""

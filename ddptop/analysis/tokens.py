"""Tokens per second of the models with tokens: examples/s times the tokens per example.

One example of a language model is one sequence of ``seq_len`` tokens (``bench_kernels.transformer``); a
workload counts its own (``tokens(batch)``, ``ddptop.protocol.workload``), divided by its batch size, so
every examples/s figure of such a configuration has a tokens/s figure beside it, its interval scaled alike:
the per-configuration percentiles, the scaling rows, the batch sweep, the tuning table and DataParallel
against DDP. A configuration without a sequence length (the image models) gets no key at all, so a summary
of CNNs reads as before.
"""

from __future__ import annotations

from typing import Any

from ddptop.protocol import modelspec
from ddptop.records import Estimate


def scaled(value: Any, factor: float) -> Any:
    """``value`` (a number, a [low, high] interval or None) times ``factor``."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [v * factor if v is not None else None for v in value]
    return value * factor


def tokens_of(config: dict[str, Any]) -> float | None:
    """Tokens per example of a configuration: what its rank or the plan counted (a transformer's sequence
    length, a workload's tokens(batch)); a summary from before the workloads has only the sequence length."""
    if "tokens_per_example" in config or not modelspec.is_builtin(str(config.get("model", ""))):
        return config.get("tokens_per_example")
    return config.get("seq_len")


def add_token_rates(doc: dict[str, Any]) -> None:
    """Add tokens/s beside every examples/s of a configuration with a sequence length, in a summary document
    (``ddptop.report.build``) before it becomes a ``Summary``."""
    configs = doc.get("configs") or []
    by_id = {c["config_id"]: tokens_of(c) for c in configs if tokens_of(c)}
    by_model = {c["model"]: tokens_of(c) for c in configs if tokens_of(c)}
    if not by_id:
        return
    for entry in configs:
        seq_len, stats = tokens_of(entry), entry.get("stats")
        if not seq_len or not stats:
            continue
        figures = stats.get("ex_sec_total") or {}
        stats["tok_sec_total"] = {p: scaled(v, seq_len) for p, v in figures.items()}
        stats["tok_sec_total_p50_ci"] = scaled(stats.get("ex_sec_total_p50_ci"), seq_len)
    for table in doc.get("scaling") or []:
        for row in table.get("rows") or []:
            _add(row, by_id.get(row.get("config_id")), "ex_sec_total", "tok_sec_total")
    for table in doc.get("batch_throughput") or []:
        seq_len = by_model.get(table.get("model"))
        if seq_len:
            table["best_tok_sec_total"] = scaled(table.get("best_ex_sec_total"), seq_len)
        for row in table.get("rows") or []:
            _add(row, seq_len, "ex_sec_total", "tok_sec_total")
    for table in doc.get("tuning") or []:
        for row in [*(table.get("rows") or []), *(table.get("combination") or [])]:
            _add(row, by_id.get(row.get("config_id")), "ex_sec_total", "tok_sec_total")
    for row in doc.get("dp_vs_ddp") or []:
        seq_len = by_model.get(row.get("model"))
        _add(row, seq_len, "dp_ex_sec_total", "dp_tok_sec_total")
        _add(row, seq_len, "ddp_ex_sec_total", "ddp_tok_sec_total")


def _add(row: dict[str, Any], seq_len: float | None, examples: str, tokens: str) -> None:
    """``row[tokens]`` from ``row[examples]``: an estimate from an estimate, else the figure and its ``_ci``
    (where the examples/s has one), as the row holds them."""
    if not seq_len:
        return
    found = row.get(examples)
    if isinstance(found, Estimate):
        row[tokens] = Estimate(value=found.value * seq_len, ci=scaled(found.ci, seq_len), method=found.method)
        return
    row[tokens] = scaled(found, seq_len)
    if f"{examples}_ci" in row:
        row[f"{tokens}_ci"] = scaled(row.get(f"{examples}_ci"), seq_len)

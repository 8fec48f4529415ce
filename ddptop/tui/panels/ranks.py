"""Every rank of the running launch: its process's CPU, memory, threads and GPU, its last and median step; for
a user's script, its share of the step spent waiting for batches, so that a rank starved of data stands out."""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text

from ddptop.records import value_of
from ddptop.run.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable

# (key, label, width, priority): the lowest priority is dropped first in a narrow window
RANK_COLUMNS = (
    ("rank", "rank", 4), ("pid", "PID", 8, 60), ("host", "host", 16, 40), ("gpu", "GPU", 3, 80),
    ("cpu", "CPU %", 5, 90), ("rss", "RSS GiB", 7, 70), ("threads", "threads", 7, 30),
    ("last", "last step s", 11, 85), ("median", "median s", 8), ("mark", "", 16),
)


# a user's script's plan: each rank's share of its step spent waiting for batches, before its last step
SCRIPT_RANK_COLUMNS = (*RANK_COLUMNS[:7], ("wait", "data wait", 9, 75), *RANK_COLUMNS[7:])


class RankTable(LineTable):
    def __init__(self, data_wait: bool = False, **kwargs: Any) -> None:
        """``data_wait``: the plan runs a user's script, whose probe times each rank's waits for batches."""
        super().__init__(SCRIPT_RANK_COLUMNS if data_wait else RANK_COLUMNS, **kwargs)
        self._drawn_from: tuple[Any, ...] | None = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        latest = snapshot.telemetry.latest or {}
        config = snapshot.session.current()
        processes = snapshot.session.ranks  # every node's ranks
        others = [node.latest or {} for _, node in sorted(snapshot.telemetry.nodes.items())]
        drawn_from = (latest.get("t"), tuple(o.get("t") for o in others), config and config.config_id,
                      config and config.revision, processes)
        if drawn_from == self._drawn_from:
            return
        self._drawn_from = drawn_from
        by_pid = {r["pid"]: r for r in latest.get("ranks") or []}
        # a follower node's readings of its own ranks (its timeline): matched by rank and PID, PIDs being
        # per host
        by_rank = {(r.get("rank"), r.get("pid")): r for other in others for r in other.get("ranks") or []}
        stats = config.stats if config is not None else None
        medians = stats.rank_medians if stats is not None else {}
        straggler = stats.straggler if stats is not None else None
        sampled_host = (snapshot.session.writer or {}).get("host") or os.uname().nodename
        wanted = [str(p.rank) for p in processes]
        if wanted != self.rows:
            self.clear()
        for process in processes:
            row = str(process.rank)
            reading = (by_pid.get(process.pid, {}) if process.host in ("", sampled_host)
                       else by_rank.get((process.rank, process.pid), {}))
            samples = config.tails.get(process.rank, ()) if config is not None else ()
            flagged = bool(straggler and straggler.flagged and straggler.rank == process.rank)
            script = config.script if config is not None else None
            share = script.rank_data_wait.get(process.rank) if script is not None else None
            starved = script is not None and script.starved_rank == process.rank
            mark: Text | str = ""
            if flagged and straggler:
                mark = Text(f"straggler x{value_of(straggler.ratio) or 0.0:.2f}", style="bold red")
            elif starved:  # the others wait for it at their next collective
                mark = Text("starved of data", style="bold yellow")
            self.set_row(row, {
                "rank": row,
                "pid": str(process.pid),
                "host": process.host or "-",
                "gpu": "-" if reading.get("gpu") is None else str(reading["gpu"]),
                "cpu": "-" if reading.get("cpu") is None else f"{reading['cpu']:.0f}",
                "rss": fmt.gib(reading.get("rss")),
                "threads": str(reading.get("threads", "-")),
                "last": fmt.seconds(samples[-1]) if samples else "-",
                "median": fmt.seconds(medians.get(process.rank)),
                "wait": "-" if share is None else Text(f"{100 * share:.0f}%", style="bold yellow" if starved else ""),
                "mark": mark,
            })

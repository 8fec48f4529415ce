"""How a configuration's failure is said: which of its errors is the cause, the status that cause gives it, and
the one line (its reason) that tells it, in whole sentences.

Ranks report errors in their own files, read in no particular order, and a rank that dies takes its peers down
with errors of their own (a connection closed by the peer): the session (``ddptop.run.session``) asks here
which one ended the configuration, each time another is read.
"""

from __future__ import annotations

import re
from typing import Any

from ddptop.protocol.vocab import Status
from ddptop.protocol.wire import ENDED_BY_SCRIPT

def cause_in_front(cause: str, reason: str | None) -> str:
    """A rank that died silently comes first; what the other ranks said follows as its echo."""
    return f"{cause}; then {reason}" if reason else cause


def script_ended_apart(ends: dict[int, dict[str, Any]]) -> str | None:
    """A script's ranks that ended it themselves (it returned) while the configuration failed: ranks that reach
    their end at different steps, one leaving the others waiting in a collective for it (a peer's 'connection
    closed', or a hang). The words that say so, to put in front of the configuration's reason; None where no
    rank ended its script itself."""
    done = sorted(rank for rank, end in ends.items()
                  if end.get("status") == Status.OK and end.get("ended_by") == ENDED_BY_SCRIPT)
    if not done:
        return None
    steps = ", ".join(f"rank {rank} after {(ends[rank].get('warmup_iters') or 0) + (ends[rank].get('iters') or 0)} "
                      "steps" for rank in done)
    return (f"the script ended by itself on {steps} while its other ranks went on: ranks that reach their end at "
            "different steps (uneven data across ranks, no DistributedSampler?) leave the others waiting in a "
            "collective")


def measured_nothing(end: dict[str, Any]) -> bool:
    """A rank's config_end of a script that ended itself (it returned, or ``sys.exit(0)``) before its first
    measured step, before its first training step or in its warm-up: nothing of it was measured in that launch."""
    return (end.get("status") == Status.OK and end.get("ended_by") == ENDED_BY_SCRIPT
            and not (end.get("iters") or 0))


def script_ended_early(ends: dict[int, dict[str, Any]], ranks: int, exit_code: int | None = None,
                       last_output: str | None = None) -> str | None:
    """A script's launch (``ends``: rank -> its config_end there, of ``ranks`` ranks) in which it ended before its
    first measured step: nothing measured, so its configuration fails. The words that say so: that it trains in
    processes of its own where it called ``torch.multiprocessing.spawn``, that it ended in its warm-up (how many
    steps it ran), else that it ended before its first training step, with the exit code and the last line it
    wrote (the script's own reason, as a script that cannot run here gives it); None where no rank ended so."""
    early = sorted(rank for rank, end in ends.items() if measured_nothing(end))
    if not early:
        return None
    where = "" if len(early) >= ranks else f" on rank{'s' if len(early) > 1 else ''} {', '.join(map(str, early))}"
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    said = f"; its last output: {brief_message(last_output, REASON_CHARS // 2)}" if last_output else ""
    warmed = max((ends[rank].get("warmup_iters") or 0) for rank in early)
    if warmed:
        return (f"the script ended after {warmed} warm-up step{'s' if warmed > 1 else ''}, before its first "
                f"measured step{where}{code}: nothing measured; let it train longer (its own step or epoch count) "
                f"or lower --warmup{said}")
    if any((ends[rank].get("script") or {}).get("spawned") for rank in early):
        return (f"the script trains in processes of its own: nothing measured{where}{code}; it called "
                "torch.multiprocessing.spawn and ended without a training step in the ranks torchrun started, the "
                "only processes ddptop measures")
    return f"the script ended before its first training step{where}{code}: nothing measured{said}"


def first_error(errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first error in time: the cause. A failing rank reports before it exits, and its peers' errors (a
    connection closed by the peer) come only after; which rank's file is read first is no guide."""
    return min(errors, key=lambda e: e["t"]) if errors else None


def error_reason(errors: list[dict[str, Any]]) -> str | None:
    """The reason the first error in time gives, or None without any."""
    first = first_error(errors)
    return error_words(first) if first else None


def fault_status(errors: list[dict[str, Any]], reported: str) -> str:
    """A failed configuration's status is its first error's kind: out of memory on rank 1 is what ended it,
    even where rank 0's 'connection closed' (failed) was read first."""
    first = first_error(errors)
    if first is None:
        return reported
    return Status.OOM if first.get("oom") else Status.FAILED


REASON_CHARS = 500  # a reason's length at most; the rank's whole message is in the configuration's log tail
# sentences of advice in an out-of-memory message (torch's "If reserved but unallocated memory is large try ...",
# "See documentation for Memory Management (url)"): the log tail keeps them, the reason keeps the figures
_ADVICE = ("If ", "See ")
_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=\S)")


def error_words(error: dict[str, Any]) -> str:
    """A rank's error event in one line: its message's first line in whole sentences (for an out of memory: what
    was asked, the capacity, what was in use, without torch's advice), never cut inside a word."""
    prefix = "out of memory: " if error.get("oom") else ""
    head = f"{prefix}rank {error['rank']}: {error['error_type']}: "
    return head + brief_message(str(error["message"]), REASON_CHARS - len(head), drop_advice=bool(error.get("oom")))


def brief_message(message: str, limit: int, drop_advice: bool = False) -> str:
    """The first line of ``message`` in as many whole sentences as fit in ``limit`` characters, " …" where
    anything was left out; a first sentence longer than the limit is cut at a space."""
    lines = message.strip().splitlines() or [""]
    sentences = _SENTENCE_END.split(lines[0].strip())
    shown = [s for s in sentences if not s.startswith(_ADVICE)] if drop_advice else sentences
    kept: list[str] = []
    for sentence in shown or sentences[:1]:
        if len(" ".join(kept + [sentence])) > limit - 2:  # room for " …"
            break
        kept.append(sentence)
    if not kept:
        cut = sentences[0][:max(1, limit - 2)]
        kept = [cut.rsplit(" ", 1)[0] if " " in cut else cut]
    text = " ".join(kept)
    whole = len(lines) == 1 and kept == sentences
    return text if whole else text + " …"

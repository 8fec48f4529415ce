"""The saved summary files of the recorded runs, rebuilt from their events, with the two things that differ
from one build to the next (when, and where the run directory was copied to) put as fixed words.

``python3 -m tests.summary_golden`` writes them to tests/data/golden/; ``tests/test_summary_model.py``
holds every later build to them byte for byte (change them only with a change of the figures themselves).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every recorded run of tests/data: the 8-GPU and CPU runs, the H100's (default plan, tune, batch sweep to OOM, a
# second machine), a script's run and its tune
RECORDED = ("recorded-run", "recorded-cpu-run", "h100/default", "h100/oom", "h100/spread-second-machine", "h100/tune",
            "script-run", "script-tune")
GOLDEN = os.path.join(REPO, "tests", "data", "golden")


def rendered(name: str) -> dict[str, str]:
    """summary.json, .md and .csv of one recorded run as built now, and the report a terminal shows: file
    name -> text."""
    from ddptop.report import build, sections, store

    with tempfile.TemporaryDirectory() as scratch:
        run = os.path.join(scratch, "RUN")
        shutil.copytree(os.path.join(REPO, "tests", "data", name), run)
        summary, _ = build.load_target(run, rebuild=True)
        paths = store._write_summary(summary, run)
        texts = {"report.txt": sections.text_report(summary)}
        for path in (paths["json"], paths["md"], paths["csv"]):
            with open(path, encoding="utf-8") as handle:
                texts[os.path.basename(path)] = handle.read()
        return {file: re.sub(r'"created": "[^"]*"', '"created": "CREATED"', text.replace(os.path.abspath(run), "RUN_DIR"))
                for file, text in texts.items()}


def golden_path(name: str, file: str) -> str:
    return os.path.join(GOLDEN, f"{name.replace('/', '-')}.{file}")


def main() -> int:
    os.makedirs(GOLDEN, exist_ok=True)
    for name in RECORDED:
        for file, text in rendered(name).items():
            with open(golden_path(name, file), "w", encoding="utf-8") as handle:
                handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The summary's files stay what they were: every recorded run rebuilt gives its saved JSON, Markdown, CSV
and terminal report byte for byte (``tests/summary_golden.py`` wrote them)."""

from __future__ import annotations

import pytest

from tests.summary_golden import RECORDED, golden_path, rendered


@pytest.mark.parametrize("name", RECORDED)
def test_rebuilt_summary_files_are_byte_for_byte_the_recorded_ones(name: str) -> None:
    for file, text in rendered(name).items():
        with open(golden_path(name, file), encoding="utf-8") as handle:
            assert text == handle.read(), f"{name}: {file} changed"

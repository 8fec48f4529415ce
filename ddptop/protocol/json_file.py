"""Reading a whole JSON file, and why one could not be read, sorted so that each caller says it in its own
words (a missing summary, a damaged driver report). Standard library only."""

from __future__ import annotations

import json
from typing import Any


class JsonFileError(Exception):
    """A JSON file that could not be read; ``error`` is what opening or parsing it raised."""

    def __init__(self, path: str, error: OSError | ValueError | RecursionError) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path
        self.error = error

    @property
    def missing(self) -> bool:
        return isinstance(self.error, FileNotFoundError)

    @property
    def damaged(self) -> bool:
        """The file was read but holds no JSON: bad UTF-8, bad JSON, or nested deeper than the parser goes."""
        return not isinstance(self.error, OSError)

    @property
    def reason(self) -> str:
        """Why, in one line: the system's words for a file that cannot be read ("Permission denied"), the
        parser's for one that is no JSON."""
        if isinstance(self.error, OSError):
            return self.error.strerror or str(self.error)
        return (str(self.error).splitlines() or [type(self.error).__name__])[0]


def read_json_file(path: str) -> Any:
    """The JSON value in the file at ``path`` (UTF-8); ``JsonFileError`` where it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise JsonFileError(path, exc) from exc

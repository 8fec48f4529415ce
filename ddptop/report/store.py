"""Store a run's scaling summary: summary.json plus its Markdown and CSV renderings, and read them back.

``save_summary`` writes summary.json/.md/.csv atomically; ``load_summary`` refuses documents of an unknown
schema or version and upgrades older versions it knows (the renamed keys are in ``ddptop.report.keys``);
``ddptop.report.build.load_target`` reads a run directory's summary, or builds one from its events. With
``DDPTOP_CHECK_SUMMARIES=1`` (the test suite's), every summary written is checked for contradictions
(``ddptop.report.consistency``) and one that contradicts itself raises after it is written.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ddptop.errors import DdptopError
from ddptop.protocol import storage
from ddptop.protocol.json_file import JsonFileError, read_json_file
from ddptop.protocol.layout import (PLOTS_DIR, SUMMARY_CSV, SUMMARY_JSON, SUMMARY_MD,
                                    TOPOLOGY_FILE)
from ddptop.protocol.wire import encode
from ddptop.report import keys
from ddptop.report.schema import SchemaError, Summary, reading_older

SCHEMA = "ddptop.summary"
SCHEMA_VERSION = 3  # 3: every figure with an interval is one estimate record (value, ci, level, method)


class SummaryError(DdptopError):
    """A summary that cannot be read; one line for the user."""


def read_json_object(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object file: (its data, None), (None, None) where it does not exist, or (None, what is wrong)."""
    try:
        data = read_json_file(path)
    except JsonFileError as exc:
        if exc.missing:
            return None, None
        return None, f"not JSON ({exc.reason[:120]})" if exc.damaged else exc.reason
    return (data, None) if isinstance(data, dict) else (None, f"not a JSON object but {type(data).__name__}")


def load_saved_topology(run_dir: str) -> dict[str, Any] | None:
    return read_json_object(os.path.join(run_dir, TOPOLOGY_FILE))[0]


def summary_paths(run_dir: str) -> dict[str, str]:
    """Where a run's summary files go: json, md, csv."""
    return {key: os.path.join(run_dir, name) for key, name in
            (("json", SUMMARY_JSON), ("md", SUMMARY_MD), ("csv", SUMMARY_CSV))}


CHECK_ENV = "DDPTOP_CHECK_SUMMARIES"  # "1": every summary built or saved is checked for contradictions (the tests)


def _write_summary(summary: Summary, directory: str) -> dict[str, str]:
    from ddptop.report import csv_table, sections  # numpy: loaded when a summary is written, not with the view

    paths = summary_paths(directory)
    document = summary.to_json()
    storage.write_json(paths["json"], document)
    storage.write_atomic(paths["md"], sections.markdown(summary))
    storage.write_atomic(paths["csv"], csv_table.csv_text(summary))
    for name, patch in tune_patches(summary).items():  # a script's tune: the recommended change, as a patch
        paths[name] = os.path.join(directory, name)
        storage.write_atomic(paths[name], patch)
    if os.environ.get(CHECK_ENV) == "1":  # after the write: the contradicting summary stays there to be read
        check_consistency(document, paths["json"])
    return paths


def tune_patches(summary: Summary) -> dict[str, str]:
    """A script's tune: the patch of its best recommendation, per tuning table (``tune.patch``; with several
    world sizes, ``tune-n4.patch`` each)."""
    from ddptop.report.tuning_tables import best_row, patch_name  # the report's choice of the best row

    found = {}
    for table in summary.tuning:
        best = best_row(table)
        if best is not None and best.patch:
            found[patch_name(summary, table)] = best.patch
    return found


def check_consistency(document: dict[str, Any], where: str) -> None:
    """Raise ``consistency.InconsistentSummary`` listing every place where the summary contradicts itself."""
    from ddptop.report import consistency

    violations = consistency.check(document)
    if violations:
        raise consistency.InconsistentSummary(where, violations)


def default_fallback_dir() -> str:
    """A directory only this user can read, under the system's temporary directory."""
    return os.path.join(tempfile.gettempdir(), f"ddptop-{os.getuid()}")


def save_summary(
    summary: Summary,
    run_dir: str,
    fallback_dir: str | None = None,
    kept_records: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, str]:
    """Write summary.json, .md and .csv into the run directory; the paths.

    Where the run directory cannot take them (a full disk, a quota, a directory removed or made read-only),
    they go to ``fallback_dir`` (a new directory below it, user-only) and the paths say so: ``save_error``
    is why, ``fallback`` where they went; ``kept_records`` (file name -> events a full disk kept in memory)
    go there too. Where neither can, the paths hold only ``save_error``: the tables are in memory and
    printed, and ``ddptop report RUN_DIR --rebuild`` writes them once there is room."""
    try:
        return _write_summary(summary, run_dir)
    except OSError as exc:
        reason = storage.describe_os_error(exc, exc.filename or os.path.join(run_dir, SUMMARY_JSON))
    try:
        base = fallback_dir or default_fallback_dir()
        os.makedirs(base, mode=0o700, exist_ok=True)
        target = tempfile.mkdtemp(prefix=f"{os.path.basename(os.path.abspath(run_dir))}-", dir=base)
        paths = _write_summary(summary, target)
        for name, records in (kept_records or {}).items():
            storage.write_atomic(os.path.join(target, name), b"".join(map(encode, records)))
    except OSError as exc:
        return {"save_error": reason, "fallback_error": storage.describe_os_error(exc, exc.filename or "")}
    return {**paths, "save_error": reason, "fallback": target}


def save_plots_safely(summary: Summary, run_dir: str) -> dict[str, str]:
    """Draw the plots; a plotting fault is reported in the paths, never allowed to lose the summary."""
    try:
        from ddptop.report import plots

        written = plots.save_plots(summary, run_dir)
    except OSError as exc:  # a full disk: the pictures drawn before it are whole, the rest not written
        return {"plots_error": storage.describe_os_error(exc, exc.filename or os.path.join(run_dir, PLOTS_DIR))}
    except Exception as exc:  # noqa: BLE001 - the numbers are saved already; say why the pictures are not
        return {"plots_error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return {"plots": os.path.join(run_dir, PLOTS_DIR)} if written else {}


# Top-level keys every reader relies on, and their JSON types; anything else may be missing.
REQUIRED_KEYS = {"environment": dict, "plan": dict, "configs": list, "scaling": list, "overhead": dict}


def load_summary(path: str) -> Summary:
    """A saved summary, checked and upgraded to this schema version; a ``SummaryError`` says why not."""
    try:
        data = read_json_file(path)
    except JsonFileError as exc:
        if exc.missing:
            raise SummaryError(f"{path} does not exist") from None
        if isinstance(exc.error, IsADirectoryError):
            raise SummaryError(f"{path} is a directory, not a summary file") from None
        raise SummaryError(f"{path} is not a readable JSON summary: {str(exc.error)[:200]}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SummaryError(f"{path} is not a ddptop summary")
    version = data.get("schema_version")
    if version not in (1, 2, SCHEMA_VERSION):
        raise SummaryError(f"{path} has summary schema version {version!r}; this ddptop reads 1 to {SCHEMA_VERSION}")
    for key, kind in REQUIRED_KEYS.items():
        if not isinstance(data.get(key), kind):
            raise SummaryError(f"{path} is damaged: {key!r} is missing or not a JSON {kind.__name__}")
    if version == 1:
        upgrade_v1(data)
    data["schema_version"] = SCHEMA_VERSION  # read as this version from here on (written so by --rebuild)
    try:
        if version == SCHEMA_VERSION:
            return Summary.from_json(data)
        with reading_older():  # a figure beside its interval (<name>, <name>_ci): folded into one estimate
            return Summary.from_json(data)
    except SchemaError as exc:
        raise SummaryError(f"{path} is damaged: {exc}") from None


def _rename(record: Any, renamed: dict[str, str]) -> None:
    """Give ``record`` the current names of ``renamed`` (current -> version 1 name), in place."""
    if isinstance(record, dict):
        for new, old in renamed.items():
            if old in record:
                record[new] = record.pop(old)


def upgrade_v1(data: dict[str, Any]) -> None:
    """Make a version 1 document read as version 2, in place: only key names changed between them, so
    every reader asks for the current names alone. Parts of the wrong shape are left for the readers."""
    for table in data["scaling"]:
        rows = table.get("rows") if isinstance(table, dict) else None
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, dict):
                _rename(row, keys.ROW_RENAMED)
                _rename(row.get("epoch"), keys.EPOCH_RENAMED)
    data["schema_version"] = 2

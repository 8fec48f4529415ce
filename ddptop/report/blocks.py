"""A section of the report as neutral content, and the two writers that render it: text and Markdown.

A section builds one ``Block`` from the summary: its heading (the text form's first line; Markdown puts the
section's title in a ``##`` heading instead) and its parts in order: a ``Table`` (a header, rows of cells,
whether the first column is a label written left-aligned), a ``Note`` (a sentence under a table), a
``Caption`` (a line over a table, such as one scaling table's title), ``Lines`` (a list, one entry a line),
``Pairs`` (a name and a sentence per line, such as each configuration's verdict), ``Items`` (entries with
details under each) or ``Verbatim`` (text kept as it is, a matrix: a fenced block in Markdown). Each form
decides its own layout once, here, instead of every section writing a text and a Markdown twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    first_left: bool = False  # the first column is a label, written left-aligned in text


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class Caption:
    text: str


@dataclass(frozen=True)
class Lines:
    lines: Sequence[str]
    indent: bool = True  # in text, under the heading by two spaces


@dataclass(frozen=True)
class Pairs:
    pairs: Sequence[tuple[str, str]]  # (a configuration id, a sentence): the ids aligned in text, `code` in Markdown


@dataclass(frozen=True)
class Items:
    entries: Sequence[tuple[str, str, Sequence[str]]]  # (a configuration id, what it is, the details)


@dataclass(frozen=True)
class Verbatim:
    text: str  # ends with a newline; the block's only part


Part = Table | Note | Caption | Lines | Pairs | Items | Verbatim


@dataclass
class Block:
    heading: str | None = None
    parts: list[Part] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.parts)


def aligned(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], first_left: bool = False) -> list[str]:
    """A table for a terminal: columns as wide as their widest cell, figures right-aligned."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return [
        "  " + "  ".join(c.ljust(w) if (first_left and i == 0) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in table
    ]


def markdown_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def text(block: Block) -> str:
    """The block for a terminal: its heading, then its parts (tables, notes and lists indented two spaces,
    a caption after the first preceded by a blank line); "" for an empty block."""
    if not block:
        return ""
    if len(block.parts) == 1 and isinstance(block.parts[0], Verbatim) and not block.heading:
        return block.parts[0].text
    lines = [block.heading] if block.heading else []
    for part in block.parts:
        if isinstance(part, Table):
            lines += aligned(part.header, part.rows, part.first_left)
        elif isinstance(part, Note):
            lines.append("  " + part.text)
        elif isinstance(part, Caption):
            lines += ["", part.text] if lines else [part.text]
        elif isinstance(part, Lines):
            lines += [("  " if part.indent else "") + line for line in part.lines]
        elif isinstance(part, Pairs):
            width = max((len(name) for name, _ in part.pairs), default=0)
            lines += [f"  {name:<{width}}  {sentence}" for name, sentence in part.pairs]
        elif isinstance(part, Items):
            for name, head, details in part.entries:
                lines += [f"  {name}: {head}"] + [f"    {detail}" for detail in details]
        else:
            lines += part.text.rstrip("\n").splitlines()
    return "\n".join(lines + [""])


def markdown(block: Block) -> list[str]:
    """The block's lines for summary.md, under the section's ``##`` heading; [] for an empty block."""
    lines: list[str] = []
    for part in block.parts:
        if isinstance(part, Table):
            lines += markdown_table(part.header, part.rows) + [""]
        elif isinstance(part, (Note, Caption)):
            lines += [part.text, ""]
        elif isinstance(part, Lines):
            lines += [f"- {line}" for line in part.lines] + [""]
        elif isinstance(part, Pairs):
            lines += [f"- `{name}`: {sentence}" for name, sentence in part.pairs] + [""]
        elif isinstance(part, Items):
            for name, head, details in part.entries:
                lines += [f"- `{name}`: {head}"] + [f"  - {detail}" for detail in details]
            lines.append("")
        else:
            lines += ["```", part.text.rstrip(), "```", ""]
    return lines

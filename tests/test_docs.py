"""The documentation holds together: README.md is a front page, its Quickstart is what CI runs, and every
relative link in README.md and docs/*.md reaches a file (and, with a ``#anchor``, a heading of it).

Fast and offline: it reads files only.
"""

import re
import shlex
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
CI_RUN = REPO / ".ci" / "run"

README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped except hyphens (and underscores, which
    GitHub keeps as word characters), each space a hyphen. Markdown links keep their text only."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file, duplicates numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path):
    """(line number, target) of every link in a Markdown file that points inside the repository."""
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        line = _INLINE_CODE.sub("", line)
        for match in _LINK.finditer(line):
            target = match.group(2)
            if _SCHEME.match(target) or target.startswith("//"):
                continue  # http(s), mailto: not checked here (no network)
            yield number, target


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """The links of one Markdown file that reach no file, leave the repository, or name a missing heading."""
    problems = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path.resolve()
        where = f"{path.relative_to(root)}:{number}: {target}"
        if root.resolve() not in (resolved, *resolved.parents):
            problems.append(f"{where} (leaves the repository)")
            continue
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
            continue
        if anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            problems.append(f"{where} (no heading with anchor #{anchor} in {resolved.relative_to(root.resolve())})")
    return problems


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def section(text: str, title: str) -> str:
    """The text under a level-2 heading, up to the next level-2 heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start + 1:end])


def fenced_blocks(text: str) -> list[list[str]]:
    """The non-empty lines of each fenced code block."""
    blocks, current = [], None
    for line in text.splitlines():
        if _FENCE.match(line):
            if current is None:
                current = []
            else:
                blocks.append([entry for entry in current if entry.strip()])
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def ci_test_command() -> str:
    """The command .ci/run executes for the README's test command: the first command line after its
    ``# README test command:`` comment."""
    lines = CI_RUN.read_text(encoding="utf-8").splitlines()
    marker = next(i for i, line in enumerate(lines) if "README test command" in line)
    return next(line.strip() for line in lines[marker + 1:] if line.strip() and not line.lstrip().startswith("#"))


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


def test_quickstart_has_two_commands_and_the_second_is_what_ci_runs():
    blocks = fenced_blocks(section(README.read_text(encoding="utf-8"), "Quickstart"))
    assert len(blocks) == 2, f"the Quickstart has {len(blocks)} fenced blocks, not 2"
    assert all(len(block) == 1 for block in blocks), f"each Quickstart block is one command: {blocks}"
    install_and_run, install_and_test = blocks[0][0].strip(), blocks[1][0].strip()
    assert "pip install" in install_and_run and install_and_run.endswith("ddptop"), install_and_run
    assert "pytest" in install_and_test, install_and_test
    assert shlex.split(install_and_test) == shlex.split(ci_test_command()), (
        f"README's test command {install_and_test!r} is not what .ci/run runs: {ci_test_command()!r}")


def test_readme_keeps_what_ran_on_which_hardware():
    text = README.read_text(encoding="utf-8")
    tested = section(text, "Tested on")
    assert "every GPU path is unverified on real hardware" in tested
    assert "simulated nodes" in tested
    assert "gloo" in section(text, "Without a GPU")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_docs_index_links_every_page():
    index = DOCS / "README.md"
    linked = {(index.parent / unquote(target.partition("#")[0])).resolve()
              for _, target in relative_links(index) if target.partition("#")[0]}
    pages = {page.resolve() for page in DOCS.glob("*.md") if page.name != "README.md"}
    missing = sorted(str(page.relative_to(REPO)) for page in pages - linked)
    assert not missing, f"docs/README.md does not link {missing}"
    assert any(target.startswith("docs/README.md") for _, target in relative_links(README))


def test_github_slug_rules():
    assert github_slug("Comparing two runs: `ddptop diff A B`") == "comparing-two-runs-ddptop-diff-a-b"
    assert github_slug("Why it is not faster: FLOPs, MFU, hardware counters, link peaks, a verdict") == (
        "why-it-is-not-faster-flops-mfu-hardware-counters-link-peaks-a-verdict")
    assert github_slug("Several nodes: torchrun's rendezvous, or SLURM") == (
        "several-nodes-torchruns-rendezvous-or-slurm")
    assert github_slug("The shipped nodes (`ddptop/telemetry/fake/profiles/`)") == "the-shipped-nodes-ddptoptelemetryfakeprofiles"


def test_the_link_check_catches_a_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Some part: here\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/page.md) [ok anchor](docs/page.md#some-part-here) [self](#top)\n"
        "[missing](docs/nope.md) [bad anchor](docs/page.md#no-such-part) [out](../elsewhere.md)\n"
        "```\n[in code](docs/ignored.md)\n```\n# Top\n",
        encoding="utf-8",
    )
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 3, problems
    assert "docs/nope.md (no such file)" in problems[0]
    assert "#no-such-part" in problems[1]
    assert "leaves the repository" in problems[2]

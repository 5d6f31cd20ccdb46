"""The documentation's links: every relative link in the repository's
Markdown files resolves to a file inside the repository (and, with an
anchor, to a heading of that file), every `docs/NAME.md, "Heading"`
reference in the tree names a heading that exists, and the README links
nothing outside the repository."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Folders holding the repository's own Markdown (build outputs excluded).
DOC_DIRS = ("docs", "python", "runtime", "bench", "examples", "scripts", "test")

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# A prose reference to a section: docs/performance.md, "Open levers".
SECTION_REF = re.compile(r"docs/([\w-]+\.md),\s+\"([^\"]+)\"")


def markdown_files():
    files = [os.path.join(ROOT, "README.md")]
    for top in DOC_DIRS:
        for base, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not d.startswith(("build", "."))]
            files += [os.path.join(base, n) for n in names if n.endswith(".md")]
    return sorted(files)


def prose_lines(path):
    """The lines of a Markdown file outside fenced code blocks."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line.strip()):
                inside = not inside
                continue
            if not inside:
                yield line


def headings(path):
    return [m.group(1) for line in prose_lines(path) if (m := HEADING.match(line))]


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def link_errors(path):
    """Why each relative link of `path` does not resolve inside the
    repository (an empty list when all do)."""
    errors = []
    for line in prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(
                os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if os.path.commonpath([resolved, ROOT]) != ROOT:
                errors.append(f"{target}: outside the repository")
            elif not os.path.exists(resolved):
                errors.append(f"{target}: no such file")
            elif anchor and (not resolved.endswith(".md")
                             or anchor not in {slug(h) for h in headings(resolved)}):
                errors.append(f"{target}: no heading for #{anchor}")
    return errors


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve_inside_the_repository(path):
    assert link_errors(path) == []


def test_readme_links_nothing_outside_the_repository():
    readme = os.path.join(ROOT, "README.md")
    external = [t for line in prose_lines(readme) for t in LINK.findall(line)
                if re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    assert external == []
    assert link_errors(readme) == []


def test_the_checker_finds_broken_links(tmp_path, monkeypatch):
    """The check can fail: a missing file, a path out of the repository and
    a missing anchor are each reported; a fenced block is not read."""
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    (tmp_path / "a.md").write_text("# Title\n\n## Some part\n")
    doc = tmp_path / "b.md"
    doc.write_text(
        "[ok](a.md) [ok](a.md#some-part) [web](https://example.org)\n"
        "[missing](c.md) [out](../x.md) [anchor](a.md#nothing)\n"
        "```\n[in a fence](d.md)\n```\n")
    assert link_errors(str(doc)) == [
        "c.md: no such file", "../x.md: outside the repository",
        "a.md#nothing: no heading for #nothing"]


def source_files():
    for base, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(("build", ".")) and d != "generated"]
        for n in names:
            if n.endswith((".md", ".py", ".cpp", ".h", ".td", ".cu", ".sh", ".mlir", ".txt")):
                yield os.path.join(base, n)


def test_section_references_name_existing_headings():
    """`docs/NAME.md, "Heading"` in any source or document names a heading
    (or the start of one) of that document."""
    missing = []
    for path in source_files():
        if os.path.samefile(path, __file__):  # its docstrings show the form
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name, heading in SECTION_REF.findall(re.sub(r"\s*\n\s*(//+|#+|\*)?\s*", " ", text)):
            doc = os.path.join(ROOT, "docs", name)
            if not os.path.exists(doc) or not any(
                    h == heading or h.startswith(heading) for h in headings(doc)):
                missing.append(f"{os.path.relpath(path, ROOT)}: docs/{name}, \"{heading}\"")
    assert missing == []

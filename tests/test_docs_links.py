"""Every relative link in README.md, docs/ (docs/notes/ included) and the READMEs of benchmarks/
and experiments/ resolves: the file exists and, where the link names an anchor, a heading or an
`<a id=...>` of that file makes it, by GitHub's rule (lowercase; spaces to '-'; punctuation but
'-' and '_' dropped; a repeated heading gets -1, -2, ...). Links in fenced code blocks and
inline code are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
INLINE_CODE = re.compile(r"`+[^`]*`+")
FENCE = re.compile(r"^\s*(```|~~~)")


def doc_files() -> list[Path]:
    readmes = [
        ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "experiments").glob("*/README.md")),
    ]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *readmes]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, cache: dict[Path, set[str]], root: Path = ROOT) -> list[str]:
    bad = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    bad.append(f"{where} (no such anchor)")
    return bad


def test_relative_links_and_anchors_resolve() -> None:
    cache: dict[Path, set[str]] = {}
    bad = [line for path in doc_files() for line in broken_links(path, cache)]
    assert not bad, "broken links:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Does the world model follow its actions?", "does-the-world-model-follow-its-actions"),
        ("Real rollouts in the judge's data", "real-rollouts-in-the-judges-data"),
        (
            "Verified imagination, seed 0, 25 steps (2026-11-28)",
            "verified-imagination-seed-0-25-steps-2026-11-28",
        ),
        ("`wmrl co-evolve`", "wmrl-co-evolve"),
        (
            "Full size on one GPU: `benchmarks/gpu_fullsize.py`",
            "full-size-on-one-gpu-benchmarksgpu_fullsizepy",
        ),
    ],
)
def test_slug_follows_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Part one\n\n## Part one\n", encoding="utf-8")
    doc = tmp_path / "b.md"
    doc.write_text(
        '[ok](a.md#part-one) [ok](a.md#part-one-1) [ok](#here) <a id="here"></a>\n'
        "[bad](a.md#part-two) [bad](c.md) `[code](c.md)` [web](https://x.org/c.md)\n"
        "```bash\n[fenced](c.md)\n```\n",
        encoding="utf-8",
    )
    bad = broken_links(doc, {}, root=tmp_path)
    assert [line.split(": ", 1)[1] for line in bad] == [
        "a.md#part-two (no such anchor)",
        "c.md (no such file)",
    ]

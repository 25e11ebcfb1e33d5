#!/usr/bin/env python3
"""results/INDEX.md: every committed file under results/, the page that cites it, and the command that
made it.

    python tools/results_index.py            # rewrite results/INDEX.md
    python tools/results_index.py --check    # exit 1 when the committed index differs, or a file is uncited

A file is *cited* when a page names it: a Markdown link, an image, or its path in the text (braces
``try{1,2}`` and globs ``try*`` expanded against the committed files). The pages that cite are the
README, every page under docs/, every README under results/, and any other Markdown under results/
that one of those cites (a race's table, a comparison), in turn. A report's raw curve (``X.jsonl``
beside ``X.json``) and a report's own rendering (``X.md`` beside ``X.json``) are cited with the report.
A folder named by a page cites the files directly in it that a README of that folder does not
explain otherwise.

The command is read from the file itself: a report's ``command`` field (JSON), the first
``Written by `...` `` or ``$ command`` line of a text file; else the one its README gives for it;
else ``unknown``. Nothing here measures anything; tests/test_results_index.py runs :func:`build`.

Standard library only: it reads the checkout, it never imports the product.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "results"
INDEX = "results/INDEX.md"
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")
# a path in running text: results/... from the root, or a relative name with a data suffix
PATH = re.compile(r"(?<![\w/.{}*-])((?:\.\./)*results/[\w.{},*?=+/-]*[\w}*/])")
NAME = re.compile(
    r"(?<![\w/.{}*-])([\w{},*?=+.-]+(?:/[\w{},*?=+.-]+)*\.(?:json|jsonl|md|txt|csv|png|gif|yaml|html|svg))\b"
)
WRITTEN_BY = re.compile(r"(?:Written|written|Made|made) by `([^`]+)`")
SHELL_LINE = re.compile(r"^\$ (.+)$", re.M)
WRITERS = {"results/summary.png": "make readme-results"}  # files the product writes at a fixed path


def committed(root: Path = ROOT) -> list[str]:
    """The files git tracks under results/ (the index itself left out)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", RESULTS], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    return sorted(p for p in out.split("\0") if p and p != INDEX and not os.path.basename(p).startswith("."))


def root_pages(root: Path = ROOT) -> list[str]:
    """The pages whose citations count from the start: README, docs/, results' READMEs."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    tracked = [p for p in out.split("\0") if p]
    pages = [p for p in tracked if p == "README.md" or (p.startswith("docs/") and p.endswith(".md"))]
    pages += [p for p in tracked if p.startswith("results/") and p.endswith("/README.md")]
    return [p for p in pages if (root / p).is_file()]


def _braces(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [
        x for part in m.group(1).split(",") for x in _braces(pattern[: m.start()] + part + pattern[m.end() :])
    ]


@dataclass
class Citations:
    """What each page names: files (path -> pages) and folders (path -> pages)."""

    files: dict[str, set[str]] = field(default_factory=dict)
    folders: dict[str, set[str]] = field(default_factory=dict)
    missing: dict[str, set[str]] = field(default_factory=dict)  # a link to a results/ file that is not there
    shown: set[str] = field(default_factory=set)  # images a page shows (Markdown image syntax)


def _targets(page: str, text: str) -> Iterable[tuple[str, str]]:
    """(repository path, how: "link", "image" or "text") for each path the page names."""
    base = os.path.dirname(page)
    for bang, target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        yield os.path.normpath(os.path.join(base, target.split("#", 1)[0])), "image" if bang else "link"
    for m in PATH.findall(text):
        yield os.path.normpath(re.sub(r"^(\.\./)+", "", m)), "text"
        if m.startswith("../"):
            yield os.path.normpath(os.path.join(base, m)), "text"
    if page.startswith(RESULTS + "/"):  # names relative to the page's own folder
        for m in NAME.findall(text):
            yield os.path.normpath(os.path.join(base, m)), "text"


def rendering(path: str, present: set[str], root: Path = ROOT) -> bool:
    """A report's own Markdown (X.md beside the report X.json): written with the report, cited with
    it, and not a page that cites (its plots are written again by ``report --render``)."""
    stem, ext = os.path.splitext(path)
    if ext != ".md" or f"{stem}.json" not in present:
        return False
    try:
        data = json.loads((root / f"{stem}.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("puffer-bench/report/")


def cite(files: list[str], root: Path = ROOT) -> Citations:
    """Follow the pages (see the module docstring) and collect what they name."""
    present = set(files)
    folders = {os.path.dirname(f) for f in files}
    folders |= {d for f in folders for d in _parents(f)}
    c = Citations()
    todo, seen = list(root_pages(root)), set()
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        text = (root / page).read_text(encoding="utf-8", errors="replace")
        for path, how in _targets(page, text):
            if not path.startswith(RESULTS + "/") and path != RESULTS:
                continue
            hits = [f for p in _braces(path) for f in _match(p, present, folders)]
            if not hits and how != "text" and not (root / path).exists():
                c.missing.setdefault(path, set()).add(page)
            for hit in hits:
                if hit in present:
                    c.files.setdefault(hit, set()).add(page)
                    if how == "image":
                        c.shown.add(hit)
                    if hit.endswith(".md") and hit not in seen and not rendering(hit, present, root):
                        todo.append(hit)
                else:
                    c.folders.setdefault(hit, set()).add(page)
    return c


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _match(path: str, present: set[str], folders: set[str]) -> list[str]:
    path = path.rstrip("/")
    if any(ch in path for ch in "*?"):
        return [p for p in sorted(present | folders) if fnmatch.fnmatchcase(p, path)]
    if path in present or path in folders:
        return [path]
    return []


@dataclass
class Entry:
    path: str
    cited_by: list[str]
    how: str  # "named", "shown" (an image), "with its report X", "in its folder X/", or "" (not cited)
    command: str


def _command_of(path: str, root: Path) -> str:
    """The command the file records itself: a report's ``command``, a text's ``Written by`` line."""
    full = root / path
    if path.endswith(".json"):
        try:
            data = json.loads(full.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return ""
        if isinstance(data, dict) and isinstance(data.get("command"), str):
            return data["command"]
        return ""
    if path.endswith((".md", ".txt")):
        head = full.read_text(encoding="utf-8", errors="replace")[:4000]
        m = WRITTEN_BY.search(head) or SHELL_LINE.search(head)
        return m.group(1).strip() if m else ""
    return ""


COMMAND_START = re.compile(
    r"^(?:[A-Z_]+=\S+ )*(?:nice -n \d+ )?(?:puffer-bench|python3?|\.venv/bin/\S+|bash|make)\b"
)
OUTPUT = re.compile(r"(?:--out|--json|--gif|--markdown|--save|--readme|>)[ =]+(\S+)")


def _commands(page: str, text: str) -> Iterable[str]:
    """The command lines of a page: code spans and the lines of code blocks (continuations joined),
    and in Python the lines of docstrings."""
    if page.endswith(".py"):
        lines = re.sub(r"\\\n\s*", " ", text).splitlines()
        yield from (s.strip() for s in lines if COMMAND_START.match(s.strip()))
        return
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if COMMAND_START.match(line.strip()):
                yield line.strip()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose):
        span = " ".join(span.split())
        if COMMAND_START.match(span):
            yield span


def _bare(path: str) -> str:
    name = os.path.basename(path)
    for suffix in (
        ".metrics.jsonl",
        ".curve.jsonl",
        ".jsonl",
        ".json",
        ".md",
        ".txt",
        ".png",
        ".csv",
        ".yaml",
    ):
        if name.endswith(suffix):
            return os.path.join(os.path.dirname(path), name[: -len(suffix)])
    return path


def _command_in_pages(path: str, pages: Iterable[str], root: Path) -> str:
    """A command a page gives whose output (``--out``, ``>`` ...) is this file or its name without the
    suffix (a command that writes a whole folder is not taken: which of its runs made the file is not
    known)."""
    best: tuple[int, str] = (0, "")
    for page in pages:
        try:
            text = (root / page).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        base = os.path.dirname(page)
        for command in _commands(page, text):
            for target in OUTPUT.findall(command):
                target = target.strip("'\"`;)")
                for where in {os.path.normpath(target), os.path.normpath(os.path.join(base, target))}:
                    score = 2 if where == path else 1 if _bare(where) == _bare(path) else 0
                    if score > best[0]:
                        best = (score, re.sub(r"\s+#.*$", "", command))
    return best[1]


def _scripts(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted((root / "tools").rglob("*.py"))]


def build(root: Path = ROOT) -> tuple[list[Entry], Citations]:
    files = committed(root)
    c = cite(files, root)
    entries = []
    scripts = _scripts(root)
    present_reports = {f: _command_of(f, root) for f in files if f.endswith(".json")}
    present_reports = {f: c for f, c in present_reports.items() if c}
    for f in files:
        pages = set(c.files.get(f, set()))
        how = "named" if pages else ""
        stem, ext = os.path.splitext(f)
        if not pages and ext in (".jsonl", ".md", ".png", ".html", ".csv") and f"{stem}.json" in c.files:
            pages = set(c.files[f"{stem}.json"])
            how = f"with its report {os.path.basename(stem)}.json"
        if not pages:  # a folder named by a page (results/PROFILE/NAME/ or deeper) cites what it holds
            for folder in [os.path.dirname(f), *reversed(_parents(os.path.dirname(f)))]:
                if folder.count("/") >= 2 and folder in c.folders:
                    pages, how = set(c.folders[folder]), f"in its folder {folder}/"
                    break
        command = _command_of(f, root)
        if not command and ext in (".jsonl", ".md") and f"{stem}.json" in present_reports:
            command = present_reports[f"{stem}.json"]
            if ext == ".md":
                command = f"written with its report; again: puffer-bench report --render {stem}.json"
        if not command and f.endswith(".metrics.jsonl"):
            command = present_reports.get(f[: -len(".metrics.jsonl")] + ".json", "")
        if not command and f in WRITERS:
            command = WRITERS[f]
        if not command and f.endswith("/README.md"):
            command = "(a page: it gives the commands of its folder)"
        if not command:
            readmes = [
                os.path.join(d, "README.md") for d in [os.path.dirname(f), *_parents(os.path.dirname(f))]
            ]
            command = _command_in_pages(f, [*sorted(pages), *readmes, *scripts], root)
        if how == "named" and f in c.shown:
            how = "shown"
        entries.append(Entry(f, sorted(pages), how, command))
    return entries, c


def render(entries: list[Entry]) -> str:
    lines = [
        "# results/: what each file is, who cites it, and the command that made it",
        "",
        "Generated by `python tools/results_index.py` (do not edit; `tests/test_results_index.py` fails",
        "when this page is stale, when a page links a results/ file that is not here, or when a file here",
        'is cited by no page). "cited by" is the page that names the file, its report, or its folder;',
        "\"command\" is read from the file (a report's `command`, a text's `Written by` line) or from its",
        "folder's README; `unknown` where neither records one. Renderings that `puffer-bench report",
        "--render FILE.json` writes again (HTML, the report's PNG plots) are not committed; the images a",
        "page shows are, and say so.",
        "",
    ]
    by_folder: dict[str, list[Entry]] = {}
    for e in entries:
        by_folder.setdefault(os.path.dirname(e.path), []).append(e)
    for folder in sorted(by_folder):
        lines += [f"## {folder}/", "", "| file | cited by | command |", "|---|---|---|"]
        for e in by_folder[folder]:
            name = e.path[len(folder) + 1 :]
            pages = ", ".join(f"[{p}]({os.path.relpath(p, RESULTS)})" for p in e.cited_by) or "**not cited**"
            if e.how == "shown":
                pages += " (an image the page shows: kept)"
            elif e.how and e.how != "named":
                pages += f" ({e.how})"
            command = e.command.replace("|", "\\|").replace("`", "'")
            command = f"`{command}`" if command else "unknown"
            lines.append(f"| [{name}]({os.path.relpath(e.path, RESULTS)}) | {pages} | {command} |")
        lines.append("")
    return "\n".join(lines)


def problems(entries: list[Entry], c: Citations, root: Path = ROOT) -> list[str]:
    """What tests/test_results_index.py refuses: a cited file missing, a file cited by no page."""
    out = [
        f"{p}: linked by {', '.join(sorted(pages))} but not committed"
        for p, pages in sorted(c.missing.items())
    ]
    out += [
        f"{e.path}: cited by no page (cite it from its folder's README, or remove it)"
        for e in entries
        if not e.cited_by
    ]
    return out


def main(argv: list[str]) -> int:
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print("error: usage: python tools/results_index.py [--check]", file=sys.stderr)
        return 2
    entries, c = build()
    text = render(entries)
    found = problems(entries, c)
    if check:
        stale = (ROOT / INDEX).read_text(encoding="utf-8") != text if (ROOT / INDEX).exists() else True
        if stale:
            found.append(f"{INDEX} is stale: run python tools/results_index.py")
        for line in found:
            print(line)
        return 1 if found else 0
    (ROOT / INDEX).write_text(text, encoding="utf-8")
    for line in found:
        print(line)
    print(f"wrote {INDEX}: {len(entries)} files, {sum(1 for e in entries if not e.cited_by)} not cited")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""docs/architecture.md's module table, written from each module's docstring.

Every module of the package gets one row: its path and the first sentence of its docstring. The rows
go between the markers :data:`BEGIN` and :data:`END`; ``python -m appliance.docs.modules`` rewrites
them, ``--check`` only says whether they are current (``tests/test_docs_modules.py`` runs it, and
fails on a module without a docstring). The table is read from the source with ``ast``: nothing is
imported.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from appliance.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DOC = Path("docs/architecture.md")
BEGIN = "<!-- modules:begin (python -m appliance.docs.modules) -->"
END = "<!-- modules:end -->"
MOST = 220  # characters of a summary; a longer first sentence is cut with "..."


def summary(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    first = " ".join(docstring.strip().split("\n\n")[0].split())
    end = re.search(r"(?<=[.!?])\s(?=[A-Z`(*:])", first)
    text = first[: end.start()] if end else first
    return text if len(text) <= MOST else text[: MOST - 3].rstrip() + "..."


def rows(root: Path = ROOT) -> list[tuple[str, str]]:
    """(path, summary) of every module under ``root/appliance``; a :class:`ConfigError` naming every
    module that has no docstring."""
    out, missing = [], []
    for path in sorted((root / "appliance").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not docstring or not docstring.strip():
            missing.append(rel)
            continue
        out.append((rel, summary(docstring)))
    if missing:
        raise ConfigError(f"modules without a docstring (the module table needs one): {', '.join(missing)}")
    return out


def table(root: Path = ROOT) -> str:
    lines = ["| module | what it is (its docstring's first sentence) |", "|---|---|"]
    bar = "\\|"  # a | inside a cell
    lines += [f"| `{path}` | {text.replace('|', bar)} |" for path, text in rows(root)]
    return "\n".join(lines)


def updated(text: str, root: Path = ROOT) -> str:
    """``text`` (the page) with the block between the markers rewritten."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ConfigError(f"{DOC} needs the lines {BEGIN!r} and {END!r}, once each, in that order")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n\n{table(root)}\n\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = ROOT / DOC
    try:
        text = path.read_text(encoding="utf-8")
        new = updated(text)
    except (OSError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if new == text:
        return 0
    if "--check" in args:
        print(f"{DOC}'s module table is stale: run python -m appliance.docs.modules", file=sys.stderr)
        return 1
    path.write_text(new, encoding="utf-8")
    print(f"wrote {DOC}'s module table")
    return 0


if __name__ == "__main__":
    sys.exit(main())

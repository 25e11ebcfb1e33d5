"""Code names cited in the docs and in docstrings that no longer exist.

A doc that says "``Trainer._act`` samples the actions" after ``_act`` was renamed sends a reader to
nothing. This finds such citations: in ``docs/**/*.md``, the READMEs and the package's docstrings and
comments, every code reference (a Sphinx role such as ``:func:`x.y```, a double-backticked name in
Python, a backticked dotted name or call in Markdown) is looked up:

- a name under ``appliance.`` is imported and followed attribute by attribute;
- a name that starts with a class or a module of the package checks its last part;
- any other name's last part must be defined somewhere in the repository's Python (a function,
  class, assignment or attribute) or C/CUDA sources.

Config keys (``train.learning_rate``), file names and command lines are not code and are skipped.
``python tools/stale_names.py`` prints one line per stale citation and exits 1 when there is one;
``tests/test_docs.py`` runs it.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DOTTED = re.compile(rf"^{IDENT}(\.{IDENT})*(\(\))?$")
ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|obj|exc):`~?([^`]+)`")
DOUBLE = re.compile(r"``([^`]+)``")
SINGLE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
CONFIG_SECTIONS = {"vec", "train", "policy", "env", "bench", "sweep", "profiles", "gate", "suite", "envs"}
NOT_CODE = {
    "self",
    "torch",
    "np",
    "numpy",
    "gymnasium",
    "gym",
    "pettingzoo",
    "optuna",
    "ray",
    "yaml",
    "os",
    "sys",
}
FILE_SUFFIXES = (
    ".py",
    ".md",
    ".yaml",
    ".yml",
    ".json",
    ".jsonl",
    ".h",
    ".c",
    ".cu",
    ".cuh",
    ".cpp",
    ".so",
    ".png",
    ".txt",
    ".db",
    ".toml",
    ".sh",
    ".ini",
    ".pt",
    ".gif",
    ".html",
    ".lock",
    ".tgz",
    ".gz",
)


def _python_files() -> list[Path]:
    return [p for d in ("appliance", "tools", "tests") for p in (ROOT / d).rglob("*.py")] + [
        ROOT / "setup.py"
    ]


def _stored_name(node: ast.AST) -> str | None:
    """The name ``node`` defines: a function's, a class's, an assigned name or attribute; else None."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        return node.attr
    return None


def class_members() -> dict[str, tuple[set[str], list[str]]]:
    """Per class name: the members its body defines (methods, class attributes, ``self.x`` set in
    a method) and the names of its bases."""
    classes: dict[str, tuple[set[str], list[str]]] = {}
    for path in _python_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            members, bases = classes.setdefault(node.name, (set(), []))
            bases.extend(b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases)
            members.update(filter(None, map(_stored_name, ast.walk(node))))
    return classes


def _has_member(classes: dict[str, tuple[set[str], list[str]]], cls: str, member: str) -> bool:
    """Whether ``cls`` (by name) or a base of it defines ``member``; True for classes not found
    here (another project's), whose members are not checked."""
    seen, todo = set(), [cls]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in classes:
            return True  # a base from another library: it may define the member
        members, bases = classes[name]
        if member in members:
            return True
        todo.extend(bases)
    return False


def defined_names() -> set[str]:
    """Every name the repository defines: Python functions, classes, assigned names and attributes,
    keyword arguments, modules; and C/CUDA functions, types, macros and struct fields."""
    names: set[str] = set()
    for path in _python_files():
        names.add(path.stem)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if (stored := _stored_name(node)) is not None:
                names.add(stored)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    for folder in ("envs", "kernels", "appliance"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".h", ".c", ".cu", ".cuh", ".cpp"}:
                names.update(re.findall(IDENT, path.read_text(encoding="utf-8", errors="replace")))
    return names


def _importable(module: str) -> bool:
    """Whether ``module`` is a top-level module this Python can import (not one of the package's own
    module names, which are looked up as names)."""
    import importlib.util

    if module in _modules():
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _resolves(qualified: str) -> bool:
    """Whether ``appliance.a.b.c`` names a module or an attribute reachable from one."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _candidate(text: str, modules: set[str], role: bool = False) -> str | None:
    """The code reference ``text`` is, or None when it is not one. A Sphinx role always is; otherwise
    a dotted name counts when it starts with one of the repository's modules or a class name
    (CamelCase), and a bare name when it is written as a call, ``name()``: config keys, metric
    names, files and other projects' names are left alone."""
    text = text.strip().lstrip("~")
    if not DOTTED.match(text) or text.endswith(FILE_SUFFIXES):
        return None
    name = text.removesuffix("()")
    parts = name.split(".")
    if role:
        return name
    if parts[0] in CONFIG_SECTIONS or parts[0] in NOT_CODE:
        return None
    if len(parts) == 1:
        return name if text.endswith("()") else None
    if parts[0] == "appliance" or parts[0] in modules or re.match(r"^[A-Z][a-z]+[A-Za-z0-9]*$", parts[0]):
        return name
    return None


def _modules() -> set[str]:
    """The names of the package's modules and packages (``trainer``, ``losses``, ``vector``, ...)."""
    return {p.stem for p in (ROOT / "appliance").rglob("*.py") if p.stem != "__init__"} | {
        p.name for p in (ROOT / "appliance").rglob("*") if p.is_dir() and (p / "__init__.py").exists()
    }


def citations() -> list[tuple[Path, int, str]]:
    """(file, line, name) for each code reference in the docs, READMEs, docstrings and comments."""
    found, modules = [], _modules()
    pages = [ROOT / "README.md", ROOT / "kernels" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith(("$ ", "puffer-bench ", "python ", ".venv/")):
                continue
            for match in SINGLE.findall(line):
                if (name := _candidate(match, modules)) is not None:
                    found.append((page, no, name))
    for path in (ROOT / "appliance").rglob("*.py"):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            refs = [(m, True) for m in ROLE.findall(line)] + [(m, False) for m in DOUBLE.findall(line)]
            for match, role in refs:
                if (name := _candidate(match, modules, role)) is not None:
                    found.append((path, no, name))
    return found


def stale() -> list[str]:
    names, classes = defined_names(), class_members()
    out = []
    for path, no, name in citations():
        parts = name.split(".")
        if name.startswith("appliance.") or (len(parts) > 1 and _importable(parts[0])):
            ok = _resolves(name)  # the package's names, and another library's (subprocess.Popen)
        elif len(parts) == 2 and parts[0] in classes:
            ok = _has_member(classes, parts[0], parts[1])
        else:
            ok = parts[-1] in names
        if not ok:
            out.append(f"{path.relative_to(ROOT)}:{no}: `{name}` is not defined anywhere in the repository")
    return out


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tool_cli  # a sibling script, not a package

    tool_cli.Parser(description=__doc__.splitlines()[0]).parse_args(argv)  # no arguments: any is refused
    sys.path.insert(0, str(ROOT))
    lines = stale()
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())

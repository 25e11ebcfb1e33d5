"""docs/architecture.md's module table is the one ``python -m appliance.docs.modules`` writes from the
modules' docstrings: a module added, moved or re-described without running it fails here, as does a
module without a docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.docs import modules
from appliance.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_the_module_table_in_architecture_md_is_current():
    text = (ROOT / modules.DOC).read_text(encoding="utf-8")
    assert modules.updated(text) == text, "stale: run python -m appliance.docs.modules"
    block = text.split(modules.BEGIN)[1].split(modules.END)[0]
    listed = {line.split("`")[1] for line in block.splitlines() if line.startswith("| `")}
    assert listed == {p.relative_to(ROOT).as_posix() for p in (ROOT / "appliance").rglob("*.py")}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "appliance" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_module_without_a_docstring_is_named(tmp_path):
    root = _tree(
        tmp_path, {"__init__.py": '"""The package."""\n', "bare.py": "X = 1\n", "sub/empty.py": '""" """\n'}
    )
    with pytest.raises(ConfigError, match=r"appliance/bare\.py, appliance/sub/empty\.py"):
        modules.table(root)


def test_a_new_module_makes_the_table_stale(tmp_path):
    root = _tree(tmp_path, {"__init__.py": '"""The package."""\n'})
    page = f"# x\n\n{modules.BEGIN}\n{modules.END}\n"
    page = modules.updated(page, root)
    assert modules.updated(page, root) == page
    _tree(tmp_path, {"new.py": '"""A new module. More about it here."""\n'})
    assert modules.updated(page, root) != page
    assert "| `appliance/new.py` | A new module. |" in modules.updated(page, root)


def test_the_summary_is_the_first_sentence_on_one_line():
    assert modules.summary("One thing: done well.\nIt is long.\n\nMore.") == "One thing: done well."
    assert modules.summary("Uses ``a.b`` (see x.y) here") == "Uses ``a.b`` (see x.y) here"
    assert modules.summary("a " * 200).endswith("...")


def test_markers_missing_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="needs the lines"):
        modules.updated("# no markers\n", tmp_path)

"""The manual stands alone: every page reachable from the index, every relative link resolving to a
file of the repository, nothing citing a document outside it, and a README a newcomer reads in five
minutes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


LAB = DOCS / "lab"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(LAB.glob("*.md"))]


def _relative_links(page: Path) -> list[str]:
    links = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        links.append(target.split("#", 1)[0])
    return links


def test_every_docs_page_is_in_the_index():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(index))
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_docs_index_links_the_lab_once_and_the_lab_index_every_lab_page():
    """The manual's index lists its task pages and links the lab (docs/lab/) once, through the lab's
    own index; the investigation logs are listed there, not beside the manual's pages."""
    index = LINK.findall((DOCS / "README.md").read_text(encoding="utf-8"))
    into_lab = [t for t in index if t.startswith("lab/")]
    assert into_lab == ["lab/README.md"], f"docs/README.md links into the lab as {into_lab}"
    lab_index = set(LINK.findall((LAB / "README.md").read_text(encoding="utf-8")))
    missing = [p.name for p in LAB.glob("*.md") if p.name != "README.md" and p.name not in lab_index]
    assert not missing, f"docs/lab/README.md does not link {missing}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    results = ROOT / "results"  # measured data: not shipped in an image or a wheel (.dockerignore)
    links = [
        t
        for t in _relative_links(page)
        if results.exists() or results not in (page.parent / t).resolve().parents
    ]
    broken = [t for t in links if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)}: links to missing files {broken}"


def test_the_readme_is_short_and_its_first_screen_has_the_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the manual's pages are in docs/"
    first_screen = "\n".join(lines[:60])
    for command in ("puffer-bench train", "puffer-bench eval", "puffer-bench run", "puffer-bench compare"):
        assert command in first_screen, f"{command!r} is not on the README's first screen"


def test_nothing_cites_a_document_outside_the_repository():
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (or git is not on PATH): the tracked files cannot be listed")
    outside = re.compile(r"DESIGN\.md|\.\./shared/|STYLE\.md")
    citing = []
    for name in tracked:
        path = ROOT / name
        if name == "tests/test_docs.py" or path.suffix not in {
            ".py",
            ".md",
            ".yaml",
            ".yml",
            ".h",
            ".c",
            ".cuh",
            ".cu",
            ".cpp",
            ".toml",
            ".sh",
            "",
        }:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if outside.search(text):
            citing.append(name)
    assert not citing, f"these files cite a document outside the repository: {citing}"


def _stale_names():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stale_names", ROOT / "tools" / "stale_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_doc_or_docstring_cites_a_name_that_no_longer_exists():
    assert _stale_names().stale() == []


def test_the_stale_name_check_finds_renamed_members_and_moved_functions():
    """The names the front-door issue found stale, as they were: a renamed method, a function cited
    under the module it left."""
    tool = _stale_names()
    classes = tool.class_members()
    assert not tool._has_member(classes, "Trainer", "_act")
    assert tool._has_member(classes, "Trainer", "policy_step")
    assert tool._has_member(classes, "RankTrainer", "policy_step")  # inherited
    assert not tool._resolves("appliance.vector.base.check_sizes")
    assert tool._resolves("appliance.vector.sizes.check_sizes")
    modules = tool._modules()
    assert tool._candidate("Trainer._act", modules) == "Trainer._act"
    assert tool._candidate("train.learning_rate", modules) is None  # a config key, not code


def _sweep_recipes() -> list[str]:
    """The `puffer-bench sweep` lines of docs/scale-out.md's recipes (the code blocks of the section)."""
    section = (DOCS / "scale-out.md").read_text(encoding="utf-8").split("### Sweep recipes", 1)[1]
    blocks = re.findall(r"^```\n(.*?)^```", section.split("\n## ", 1)[0], re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if "puffer-bench sweep " in line]


def test_the_sweep_recipes_are_commands_the_cli_takes(tmp_path):
    """Each recipe parses with the sweep command's own options, and its --storage URL is one it takes
    (the journal's shared folder stands for one here); tests/test_sweep_shared.py runs such workers."""
    import shlex

    from appliance.cli import cli
    from appliance.sweep import storage

    recipes = _sweep_recipes()
    assert len(recipes) == 4, recipes  # one machine, GPUs, PostgreSQL, journal
    command = cli.commands["sweep"]
    seen = set()
    for line in recipes:
        args = shlex.split(line.split("puffer-bench sweep ", 1)[1])
        with command.make_context("sweep", list(args)) as ctx:
            params = ctx.params
        assert params["args"][0] in ("squared", "breakout"), line
        if params["gpus"]:
            seen.add("gpus")
            assert params["gpus"] == "auto" or params["gpus"].isdigit(), line
        if params["storage"]:
            url = params["storage"].replace("/shared/sweeps", str(tmp_path))
            seen.add(storage.parse(url).kind)
    assert seen == {"gpus", "postgresql", "journal"}, seen

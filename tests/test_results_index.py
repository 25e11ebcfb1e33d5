"""results/ holds what a page cites, with an index of each file's citing page and command
(tools/results_index.py); every committed report names the command that made it; the lab's scripts
still import what they name from the product."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _index():
    return _tool("results_index", ROOT / "tools" / "results_index.py")


def _git_checkout() -> bool:
    try:
        subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return (ROOT / "results").is_dir()


needs_results = pytest.mark.skipif(
    not _git_checkout(), reason="results/ and git are not here (an image or a wheel ships neither)"
)


@needs_results
def test_every_file_under_results_is_cited_and_in_the_index():
    """A page links no results/ file that is missing, every committed file is cited by a page, and
    results/INDEX.md lists exactly the committed files (its "cited by" column may lag a page's edit;
    ``python tools/results_index.py --check`` compares it whole)."""
    tool = _index()
    entries, citations = tool.build()
    assert tool.problems(entries, citations) == []
    index = (ROOT / "results" / "INDEX.md").read_text(encoding="utf-8")
    listed = {"results/" + p for p in re.findall(r"^\| \[[^\]]*\]\(([^)]+)\)", index, re.M)}
    files = {e.path for e in entries}
    assert sorted(files - listed) == [], "not in results/INDEX.md: run python tools/results_index.py"
    assert sorted(listed - files) == [], (
        "results/INDEX.md lists files that are gone: run python tools/results_index.py"
    )


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


@pytest.mark.skipif(not _git_checkout(), reason="needs git")
def test_a_missing_cited_file_and_an_uncited_one_are_each_one_line(tmp_path):
    report = {"schema": "puffer-bench/report/1", "command": "puffer-bench run --suite quick"}
    repo = _repo(
        tmp_path,
        {
            "README.md": "[a](results/cpu/a.json) and [gone](results/cpu/gone.json)\n",
            "docs/lab/x.md": "the curves of `results/cpu/b/` and ![plot](../../results/cpu/plot.png)\n",
            "results/cpu/a.json": json.dumps(report),
            "results/cpu/a.jsonl": "{}\n",
            "results/cpu/b/README.md": "`python tools/x.py --out results/cpu/b/c.txt` wrote [c.txt](c.txt)\n",
            "results/cpu/b/c.txt": "1\n",
            "results/cpu/plot.png": "png",
            "results/cpu/stray.json": "{}",
        },
    )
    tool = _index()
    entries, citations = tool.build(repo)
    assert tool.problems(entries, citations, repo) == [
        "results/cpu/gone.json: linked by README.md but not committed",
        "results/cpu/stray.json: cited by no page (cite it from its folder's README, or remove it)",
    ]
    by_path = {e.path: e for e in entries}
    assert by_path["results/cpu/a.json"].command == "puffer-bench run --suite quick"
    assert by_path["results/cpu/a.jsonl"].how == "with its report a.json"  # the raw curve of a cited report
    assert by_path["results/cpu/b/c.txt"].command == "python tools/x.py --out results/cpu/b/c.txt"
    assert by_path["results/cpu/plot.png"].how == "shown"
    assert "(an image the page shows: kept)" in tool.render(entries)


@needs_results
def test_no_committed_report_names_a_scratch_run_folder_instead_of_its_command():
    """Reports of our runs once recorded only "our run folder experiments/RUN"; each now names the
    train command its README gives, or says the command is unknown."""
    tool = _index()
    wrong = []
    for path in tool.committed():
        if not path.endswith(".json"):
            continue
        data = json.loads((ROOT / path).read_text(encoding="utf-8"))
        if isinstance(data, dict) and str(data.get("command", "")).startswith("our run folder"):
            wrong.append(path)
    assert wrong == []


def test_the_peer_harness_report_of_our_run_records_the_command_that_made_it(tmp_path, monkeypatch):
    run = tmp_path / "experiments" / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"global_step": 1000 * i, "uptime": float(i), "env/perf": i / 10}) + "\n"
            for i in range(1, 11)
        )
    )
    (run / "config.yaml").write_text("env_name: squared\n")
    peer = _tool("pufferlib_peer", ROOT / "tools" / "pufferlib_peer.py")
    monkeypatch.setattr("appliance.sysinfo.fingerprint", lambda *a, **k: {"host_hash": "h"})
    out = tmp_path / "ours.json"
    assert peer.main(["ours", str(run), "--env", "squared", "--at", "5000", "--out", str(out)]) in (0, None)
    command = json.loads(out.read_text())["command"]
    assert command == f"python tools/pufferlib_peer.py ours {run} --env squared --at 5000 --out {out}"


IMPORT = re.compile(r"^\s*from (appliance(?:\.\w+)*) import (\([^)]*\)|[^\n#]+)", re.M)


def _product_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each ``from appliance... import name`` in the file, code in strings included
    (some scripts run code in a fresh process from a string)."""
    out = []
    for module, names in IMPORT.findall(path.read_text(encoding="utf-8")):
        for name in names.strip("()").replace("\n", " ").split(","):
            name = name.split(" as ")[0].strip().strip("\\").strip()
            if name and not name.startswith("#"):
                out.append((module, name))
    return out


SCRIPTS = sorted((ROOT / "tools").rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_lab_script_compiles_and_what_it_imports_from_the_product_exists(script: Path):
    """None of tools/results/ is run by a test; this catches a refactor that moves what one imports."""
    compile(script.read_text(encoding="utf-8"), str(script), "exec")
    missing = []
    for module, name in _product_imports(script):
        try:
            loaded = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{module} ({e})")
            continue
        if not hasattr(loaded, name) and importlib.util.find_spec(f"{module}.{name}") is None:
            missing.append(f"{module}.{name}")
    assert not missing, f"{script.relative_to(ROOT)} imports what the product no longer has: {missing}"

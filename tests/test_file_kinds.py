"""Every file a command reads or writes goes through the safe-file layer (docs/reliability.md, class 1).

One table of path kinds (each: where the file is, and the command that reads or writes it) crossed
with one list of bad files put there: a symbolic link, a FIFO, a device, a folder, a file cut short,
foreign bytes and an oversized file. Every case ends in bounded time (a FIFO or device never blocks a
read or an open), without a traceback, and either refused in one line naming the file or, where the
file kind allows it, handled as documented: a cut-short last line of a JSON-lines file is set aside
and reported, an output that is a plain file is replaced as asked. Nothing is written through a link
and a refused file is left as it was.

Three roles of path:

* ``input``: a file the user names (``--config``, ``--suite``, ``--space``, a report). It may be a
  link (dotfiles are links), so its "symlink" case is a link to a FIFO elsewhere: followed, and the
  target held to the same rules (refused, never waited on).
* ``data``: a run's or sweep's own file (``config.yaml``, ``model.pt``, ``metrics.jsonl``,
  ``latest``, ``study.db``, the journal, the env build cache). Its "symlink" case is a link to a
  file elsewhere, which must be refused and the target left unchanged.
* ``renamed``: a run's file replaced whole by a rename (``latest``): a link, FIFO or device there
  is replaced (never followed, never waited on), a folder refused.
* ``output``: a file a command writes (``compare --out``, ``report --readme``): a link is refused and
  its target kept; a plain file there is replaced, as the user asked.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import conftest
import publish_fixtures as pf
import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.testing import tiny_sweep_args

SMALL = (*conftest.SMALL, "--policy.hidden-size", "32")
RESUME = (*SMALL, "--train.total-timesteps", "128")
NEW = (*SMALL, "--train.total-timesteps", "64")
TINY = tiny_sweep_args(64)
BIG = 64 * 2**20  # past every bound a reader sets (4 MiB for YAML, 16 MiB for reports)
BAD = ("symlink", "fifo", "device", "directory", "cut-short", "foreign", "oversized")
VICTIM = b"a file elsewhere that nothing may write into\n"


def run_cli(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def words(command: str, *more):
    """``run_cli`` of the words of ``command``, then ``more``."""
    return run_cli(*command.split(), *more)


# ----------------------------------------------------------------------------- what each kind holds


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A data folder with one squared run ``r1`` (a checkpoint, its config.yaml, one metrics record)
    that ``latest`` names, made once."""
    return conftest.trained_run(tmp_path_factory.mktemp("runs"), *SMALL)


@pytest.fixture(scope="module")
def good_report(tmp_path_factory):
    data = pf.report(pf.commit_id(1), 1, {pf.METRIC: [1e6, 1.1e6, 0.9e6]})
    return pf.write(tmp_path_factory.mktemp("reports"), data, "good")


SPACE = {
    "objective": {"metric": "perf", "window": 2},
    "space": {"train.learning_rate": {"low": 0.001, "high": 0.05, "log": True}},
}
README = "# readme\n\n<!-- results:start -->\n<!-- results:end -->\n"


@dataclass
class Case:
    """Where the file under test is (``path``), what a good one holds (``good``), the command
    (``invoke``), and what else must stay as it is."""

    path: Path
    good: bytes
    invoke: Callable[[], object]
    keep: tuple[Path, ...] = ()


def _config(tmp, trained, report):
    path = tmp / "mine.yaml"
    return Case(
        path,
        b"train:\n  seed: 3\n  learning_rate: 0.01\n",
        lambda: run_cli("config", "squared", "--config", path),
    )


def _suite(tmp, trained, report):
    path = tmp / "suite.yaml"
    good = yaml.safe_dump({"name": "t", "env_sps": {"envs": ["squared"]}}).encode()
    return Case(path, good, lambda: run_cli("run", "--suite", path, "--out", tmp / "out", "--gpu", "cpu"))


def _space(tmp, trained, report):
    path = tmp / "space.yaml"
    return Case(
        path,
        yaml.safe_dump(SPACE).encode(),
        lambda: words(
            "sweep squared --trials 1 --gpu cpu --space", path, "--out", tmp / "sw", *tiny_sweep_args(64)
        ),
    )


def _compared(tmp, trained, report):
    path = tmp / "report.json"
    return Case(path, report.read_bytes(), lambda: run_cli("compare", path, report))


def _shared(tmp, trained, report):
    path = tmp / "report.json"
    return Case(path, report.read_bytes(), lambda: run_cli("share", path, "--to", tmp / "shared"))


def _found(tmp, trained, report):
    """A report among others in a results folder, found by ``history``."""
    folder = tmp / "results"
    folder.mkdir()
    path = folder / "found.json"
    return Case(path, report.read_bytes(), lambda: run_cli("history", pf.METRIC, "--results", folder))


def _run_copy(tmp, trained):
    data = tmp / "runs"
    shutil.copytree(trained, data)
    return data


def _resumed_config(tmp, trained, report):
    data = _run_copy(tmp, trained)
    path = data / "r1" / "config.yaml"
    return Case(
        path,
        path.read_bytes(),
        lambda: words("train squared --no-dashboard --resume r1 --train.data-dir", data, *RESUME),
    )


def _checkpoint(tmp, trained, report):
    data = _run_copy(tmp, trained)
    path = data / "r1" / "model.pt"
    return Case(
        path,
        path.read_bytes(),
        lambda: words(
            "eval squared --episodes 1 --load-model-path r1 --train.device cpu --train.data-dir", data
        ),
    )


def _latest(tmp, trained, report):
    data = _run_copy(tmp, trained)
    path = data / "latest"
    return Case(
        path,
        path.read_bytes(),
        lambda: words("eval squared --episodes 1 --train.device cpu --train.data-dir", data),
    )


def _latest_moved(tmp, trained, report):
    """The ``latest`` pointer a new run's first checkpoint moves (replaced by a rename)."""
    data = _run_copy(tmp, trained)
    path = data / "latest"
    return Case(
        path, path.read_bytes(), lambda: words("train squared --no-dashboard --train.data-dir", data, *NEW)
    )


def _metrics(tmp, trained, report):
    data = _run_copy(tmp, trained)
    path = data / "r1" / "metrics.jsonl"
    return Case(
        path,
        path.read_bytes(),
        lambda: words("train squared --no-dashboard --resume r1 --train.data-dir", data, *RESUME),
    )


def _sweep_args(tmp, *extra):
    space = tmp / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    return ("sweep", "squared", "--space", space, "--trials", "1", "--gpu", "cpu", *extra, *TINY)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A sweep folder with its study.db, and a journal, each of one trial, made once."""
    made = tmp_path_factory.mktemp("swept")
    assert run_cli(*_sweep_args(made, "--out", made / "sw")).exit_code == 0
    journal = made / "study.log"
    shared = _sweep_args(made, "--storage", f"journal://{journal}", "--out", made / "sw2")
    assert run_cli(*shared).exit_code == 0
    return made


def _study_db(tmp, made, report):
    shutil.copytree(made / "sw", tmp / "sw")
    path = tmp / "sw" / "study.db"
    return Case(path, path.read_bytes(), lambda: run_cli(*_sweep_args(tmp, "--out", tmp / "sw")))


def _study_journal(tmp, made, report):
    """The journal SQLite keeps beside study.db while it writes (``study.db-journal``)."""
    case = _study_db(tmp, made, report)
    return Case(case.path.with_name("study.db-journal"), b"", case.invoke)


def _journal(tmp, made, report):
    path = tmp / "study.log"
    shutil.copyfile(made / "study.log", path)
    shared = _sweep_args(tmp, "--storage", f"journal://{path}", "--out", tmp / "sw")
    return Case(path, path.read_bytes(), lambda: run_cli(*shared))


def _build_record(tmp, trained, report):
    """The env build cache's record of a PufferLib env's current build."""
    cache = tmp / "cache"
    library = cache / "foo-0" / "foo.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF not really")
    path = cache / "current" / "foo.json"
    path.parent.mkdir()
    good = json.dumps({"library": str(library), "recipe": str(library.parent / "recipe.yaml")}).encode()
    return Case(path, good, lambda: run_cli("config", "pufferlib:foo", env={"PUFFER_ENV_CACHE": str(cache)}))


def _env_source(tmp, trained, report):
    """A header in a PufferLib env's source folder, read by ``envs build`` before it compiles."""
    folder = tmp / "ocean" / "foo"
    folder.mkdir(parents=True)
    (folder / "binding.c").write_text('#include "foo.h"\n')
    path = folder / "foo.h"
    cache = {"PUFFER_ENV_CACHE": str(tmp / "cache")}
    return Case(path, b"#define OBS_SIZE 1\n", lambda: run_cli("envs", "build", folder, env=cache))


def _compare_out(tmp, trained, report):
    path = tmp / "compare.md"
    return Case(path, b"# an older comparison\n", lambda: run_cli("compare", report, report, "--out", path))


def _site(tmp, trained, report):
    """The site folder ``publish`` replaces (only a site it built before, or an empty folder)."""
    folder = tmp / "reports"
    folder.mkdir()
    shutil.copyfile(report, folder / "good.json")
    path = tmp / "site"
    return Case(path, b"", lambda: run_cli("publish", folder, "--out", path))


def _readme(tmp, trained, report):
    path = tmp / "README.md"
    return Case(
        path,
        README.encode(),
        lambda: run_cli("report", report, "--readme", path, "--results", tmp / "results"),
    )


# name: (role, make the case)
KINDS = {
    "config file (config --config)": ("input", _config),
    "suite (run --suite)": ("input", _suite),
    "sweep space (sweep --space)": ("input", _space),
    "report (compare)": ("input", _compared),
    "report (share)": ("input", _shared),
    "report in a results folder (history)": ("input", _found),
    "resumed run's config.yaml": ("data", _resumed_config),
    "checkpoint (eval)": ("data", _checkpoint),
    "latest pointer (eval)": ("data", _latest),
    "latest pointer (train moves it)": ("renamed", _latest_moved),
    "metrics.jsonl (train --resume)": ("data", _metrics),
    "study.db (sweep)": ("data", _study_db),
    "study.db-journal (sweep)": ("data", _study_journal),
    "journal (sweep --storage journal://)": ("data", _journal),
    "env build record (config pufferlib:NAME)": ("data", _build_record),
    "env source header (envs build)": ("input", _env_source),
    "output (compare --out)": ("output", _compare_out),
    "README (report --readme)": ("data", _readme),  # read, then rewritten
    "site folder (publish --out)": ("data", _site),  # a folder: a file of any kind there is refused
}
LINES = {"metrics.jsonl (train --resume)", "journal (sweep --storage journal://)"}  # JSON lines: set aside


def _device(path: Path) -> None:
    """A character device at ``path`` (/dev/zero's numbers), or a link to /dev/zero where mknod is
    not allowed (not root): either way a device is what an open of ``path`` meets."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        path.symlink_to("/dev/zero")


def _put(bad: str, role: str, line_based: bool, case: Case, tmp: Path) -> Path | None:
    """Put the ``bad`` file at ``case.path``; the file that must not change (a link's target), if any."""
    path = case.path
    path.unlink(missing_ok=True)
    if bad == "symlink":
        if role == "input":  # a link the user made is followed, and what it leads to is checked
            os.mkfifo(tmp / "elsewhere.fifo")
            path.symlink_to(tmp / "elsewhere.fifo")
            return None
        victim = tmp / "victim"
        victim.write_bytes(VICTIM)
        path.symlink_to(victim)
        return victim
    if bad == "fifo":
        os.mkfifo(path)
    elif bad == "device":
        _device(path)
    elif bad == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    elif bad == "cut-short":  # in the middle of the last line, as a kill or a full disk leaves it
        good = case.good.rstrip(b"\n")
        last = good.rfind(b"\n") + 1
        cut = good[: last + (len(good) - last) // 2]
        path.write_bytes(good + b"\n" + cut[last:] if line_based else cut)
    elif bad == "foreign":
        path.write_bytes(bytes(range(256)) * 16)
    elif bad == "oversized":
        with open(path, "wb") as f:
            f.write(case.good)
            f.truncate(BIG)  # sparse: cheap to make, refused without reading it all
    return None


def _expected(bad: str, role: str, line_based: bool) -> str:
    """'refused', 'set aside' (a JSON-lines file's cut-short last line) or 'replaced' (an output)."""
    if line_based and bad == "cut-short":
        return "set aside"
    if role == "output" and bad in ("cut-short", "foreign", "oversized"):
        return "replaced"
    if role == "renamed" and bad != "directory":  # a link, FIFO or device there is replaced, not followed
        return "replaced"
    return "refused"


# what a C compiler or SQLite reads (their content is theirs to judge): the files that are no file
NOT_FILES = {"env source header (envs build)", "study.db-journal (sweep)"}
CASES = [(k, b) for k in KINDS for b in BAD if k not in NOT_FILES or b in BAD[:4]]


@pytest.mark.parametrize(("kind", "bad"), CASES)
def test_every_bad_file_kind_over_every_path_kind_is_one_line_and_writes_nothing_through_a_link(
    tmp_path, request, good_report, kind, bad
):
    role, make = KINDS[kind]
    line_based = kind in LINES
    fixture = {_study_db: "swept", _study_journal: "swept", _journal: "swept"}.get(
        make, "trained" if role != "input" else None
    )
    made = request.getfixturevalue(fixture) if fixture else None
    case = make(tmp_path, made, good_report)
    victim = _put(bad, role, line_based, case, tmp_path)
    before = case.path.read_bytes() if case.path.is_file() and not case.path.is_symlink() else None
    with conftest.bounded():
        result = case.invoke()
    out = result.output.strip()
    assert "Traceback" not in out and not (
        result.exception and not isinstance(result.exception, SystemExit)
    ), f"{out}\n{result.exception!r}"
    if victim is not None:
        assert victim.read_bytes() == VICTIM, "written through a link"
    expected = _expected(bad, role, line_based)
    if expected == "refused":
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert result.exit_code != 0 and len(errors) == 1 and errors[0] == out.splitlines()[-1], out
        if kind != "env build record (config pufferlib:NAME)":  # that one says the env is not built
            assert str(case.path) in errors[0] or str(case.path.parent) in errors[0], out
        if before is not None:
            assert case.path.read_bytes() == before, "a refused file was written to"
        assert not case.path.with_name(case.path.name + ".damaged").exists()
    elif expected == "set aside":
        aside = case.path.with_name(case.path.name + ".damaged")
        assert aside.is_file() and "cut-short line" in out, out
        assert result.exit_code == 0, out
    else:
        assert result.exit_code in (0, 1), out  # compare exits 1 on a regression
        assert case.path.is_file() and not case.path.is_symlink(), out  # replaced, not written through
        assert case.path.read_bytes() != before, out


# ----------------------------------------------------------------------------- text from the files

# a terminal escape (clear the screen), a right-to-left override, a lone surrogate, a line break
HOSTILE = "x\x1b[2J\u202eevil\ud800\nnext"
YAML_HOSTILE = '"x\\e[2J\\u202eevil\\ud800\\nnext"'  # the same, as YAML's double-quoted escapes
UNSAFE = ("\x1b", "\u202e", "\ud800", "\ufffd\ufffd")


def _hostile_report(tmp, report, where):
    data = json.loads(report.read_text())
    if where == "cpu model":
        data["fingerprint"]["cpu"]["model"] = HOSTILE.replace("\x1b", "").replace("\n", " ")
    else:  # a control character: a report never holds one
        data["suite"]["name"] = HOSTILE
    path = tmp / "hostile.json"
    path.write_text(json.dumps(data))  # JSON writes the lone surrogate as the escape \ud800
    return path


TEXT_CASES = {
    "config key": lambda tmp, report: run_cli(
        "config", "squared", "--config", _text(tmp / "c.yaml", f"train:\n  {YAML_HOSTILE}: 1\n")),
    "config value": lambda tmp, report: run_cli(
        "config", "squared", "--config", _text(tmp / "c.yaml", f"train:\n  device: {YAML_HOSTILE}\n")),
    "sweep space key": lambda tmp, report: run_cli(
        "sweep", "squared", "--out", tmp / "sw", "--gpu", "cpu",
        "--space", _text(tmp / "s.yaml", f"space:\n  {YAML_HOSTILE}: {{low: 0.1, high: 0.2}}\n")),
    "suite name": lambda tmp, report: run_cli(
        "run", "--suite", _text(tmp / "s.yaml", f"name: {YAML_HOSTILE}\nbogus: 1\n"), "--out", tmp / "o"),
    "report string (compare)": lambda tmp, report: run_cli(
        "compare", _hostile_report(tmp, report, "cpu model"), report),
    "report control character (compare)": lambda tmp, report: run_cli(
        "compare", _hostile_report(tmp, report, "suite name"), report),
    "report string (report --markdown)": lambda tmp, report: run_cli(
        "report", _hostile_report(tmp, report, "cpu model"), "--markdown", tmp / "r.md"),
}  # fmt: skip


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_text_a_file_holds_is_shown_safely_whatever_unicode_it_holds(tmp_path, good_report, case):
    """A JSON or YAML string may hold a terminal escape, a bidi override, a lone surrogate (from a
    ``\\ud800`` escape) or a line break: what a command prints or writes of it never fails to encode,
    moves the cursor, reorders the line, or breaks a one-line error in two."""
    with conftest.bounded():
        result = TEXT_CASES[case](tmp_path, good_report)
    out = result.output
    assert not (result.exception and not isinstance(result.exception, SystemExit)), repr(result.exception)
    assert "Traceback" not in out, out
    for unsafe in UNSAFE[:3]:
        assert unsafe not in out, ascii(out)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    if result.exit_code not in (0, 1):
        assert len(errors) == 1 and out.strip().splitlines()[-1] == errors[0], ascii(out)
    written = tmp_path / "r.md"
    if written.exists():
        text = written.read_bytes().decode("utf-8")  # whole UTF-8: nothing lone in it
        assert "\u202e" not in text and "evil" in text, ascii(text)


def test_json_lines_readers_give_strings_whole_as_every_json_reader_does(tmp_path):
    """A metrics or journal line's strings come back as a report's do: a lone surrogate (from a
    ``\\ud800`` escape) and a bidi override as U+FFFD, so no later rendering can fail or reorder."""
    from appliance import safe_files

    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"env": "x\ud800\u202ey", "epoch": 1}) + "\n" + '{"epoch": 2}\n')
    records, skipped = safe_files.read_json_lines(path, "the run's metrics")
    assert skipped == 0 and records == [{"env": "x\ufffd\ufffdy", "epoch": 1}, {"epoch": 2}]

"""The journal storage (``--storage journal:///PATH``) goes through the safe-file layer
(docs/reliability.md): a journal that is not a plain file of its own, or not a journal, is refused in
one line before anything is written; a last record cut short is set aside and reported, never glued
onto; a damaged record amid the others is one line naming it."""

from __future__ import annotations

import os
import stat
import time

import pytest
import yaml
from conftest import bounded

from appliance import sweep as sw
from appliance.errors import ConfigError
from appliance.sweep import storage as st
from appliance.testing import tiny_sweep_args

SPACE = {
    "objective": {"metric": "perf", "window": 2},
    "space": {"train.learning_rate": {"low": 0.001, "high": 0.05, "log": True}},
}


def instant(spec):
    time.sleep(0.05)
    return {"state": "complete", "score": 0.5, "seconds": 0.05, "steps": 64, "curve": [[64.0, 0.5]],
            "reason": "done", "error": None}  # fmt: skip


def _sweep(tmp_path, journal, trials=1):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    options = sw.Options(trials=trials, shared=st.parse(f"journal://{journal}"))
    out = tmp_path / f"out{time.monotonic_ns()}"
    return list(
        sw.sweep(
            "squared", out, options, str(space), overrides=tiny_sweep_args(64), profile="cpu", trial=instant
        )
    )


def _make(kind, journal, tmp_path):
    """Put a ``kind`` of file where the journal goes; what must stay as it is (path, bytes) or None."""
    target = tmp_path / "target.log"
    if kind == "symlink":
        target.write_bytes(b"precious\n")
        journal.symlink_to(target)
        return target, b"precious\n"
    if kind == "symlink-to-journal":  # even a link to a real journal: never written through
        _sweep(tmp_path, target)
        kept = target.read_bytes()
        journal.symlink_to(target)
        return target, kept
    if kind == "fifo":
        os.mkfifo(journal)
        return None
    if kind == "device":
        try:
            os.mknod(journal, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
        except PermissionError:
            pytest.skip("making a device node needs root")
        return None
    if kind == "directory":
        journal.mkdir()
        return None
    if kind == "hard-link":
        _sweep(tmp_path, target)
        os.link(target, journal)
        return target, target.read_bytes()
    data = {
        "random bytes": bytes(range(256)) * 16,
        "NUL bytes": b"\0" * 4096,
        "text": b"these are my notes\nnot a journal\n",
        "other JSON lines": b'{"epoch": 1, "global_step": 64}\n',
        "oversized line": b'{"op_code":0,"worker_id":"' + b"x" * (2**20 + 10),
    }[kind]
    journal.write_bytes(data)
    return journal, data


@pytest.mark.parametrize(
    "kind",
    ["symlink", "symlink-to-journal", "fifo", "device", "directory", "hard-link", "random bytes",
     "NUL bytes", "text", "other JSON lines", "oversized line"],
)  # fmt: skip
def test_a_journal_that_is_not_a_plain_journal_is_refused_before_anything_is_written(tmp_path, kind):
    journal = tmp_path / "study.log"
    kept = _make(kind, journal, tmp_path)
    with bounded(20), pytest.raises(ConfigError) as refused:
        _sweep(tmp_path, journal)
    message = str(refused.value)
    assert "\n" not in message and str(journal) in message, message
    if kept is not None:
        path, data = kept
        assert path.read_bytes() == data, "the file was written before it was refused"
    assert not (journal.parent / (journal.name + ".damaged")).exists()


def test_a_cut_short_last_record_is_set_aside_and_reported_not_glued_onto(tmp_path, capsys):
    journal = tmp_path / "study.log"
    _sweep(tmp_path, journal)
    whole = journal.read_bytes()
    fragment = b'{"op_code":4,"worker_id":"killed-mid-write","study_id":0,"datet'
    journal.write_bytes(whole + fragment)  # a worker killed (or a disk full) in the middle of an append
    capsys.readouterr()
    lines = _sweep(tmp_path, journal, trials=2)  # a second trial: the journal is read and appended to
    err = capsys.readouterr().err
    assert any(line.startswith("wrote") for line in lines), lines
    aside = journal.with_name("study.log.damaged")
    assert aside.read_bytes() == fragment + b"\n"
    assert "cut-short line" in err and str(aside) in err, err
    assert journal.read_bytes().startswith(whole) and fragment not in journal.read_bytes()
    study = sw.open_study("unused", st.parse(f"journal://{journal}"), sw.STUDY)
    assert len([t for t in study.trials if t.state.is_finished()]) == 2


def test_a_damaged_record_amid_the_others_is_one_line_naming_it(tmp_path):
    journal = tmp_path / "study.log"
    _sweep(tmp_path, journal)
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:20] + lines[3]  # a record glued onto a cut-short one, as before the fix
    journal.write_bytes(b"".join(lines[:3] + lines[4:]))
    with pytest.raises(ConfigError, match=r"record 3 of .*study.log is damaged"):
        _sweep(tmp_path, journal, trials=2)

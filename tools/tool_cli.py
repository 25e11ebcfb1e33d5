"""What every tools/ entry point shares with puffer-bench's command line: a bad invocation is one line
(``error: ...``, exit 2), never a traceback or a usage screen; numbers are checked against a range
before any work; an output never replaces a run's own files.

Standard library only: the peer harnesses import it in PufferLib's own interpreter too.

    ap = tool_cli.Parser(description=...)
    ap.add_argument("--games", type=tool_cli.number(1, 10**6, integer=True), default=128)
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: body(a))
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# what a puffer-bench run folder holds (appliance.train.runs): a folder with one of these is a run's
RUN_MARKERS = ("metrics.jsonl", "model.pt", ".lock")


class ToolError(Exception):
    """A one-line reason a tool cannot go on (printed as ``error: ...``, exit 2)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``error: --seed: invalid int value: 'x'``, exit 2
    (argparse prints the usage screen first); its subcommands' parsers are Parsers too."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message.removeprefix('argument ')}", file=sys.stderr)
        sys.exit(2)


def guarded(body: Callable[[], int | None]) -> int:
    """Run a tool's work; a ToolError, an OS error or a failed command is one line and exit 2, Ctrl-C
    one line and 130. Returns the exit status (``body``'s, or 0)."""
    try:
        return body() or 0
    except (ToolError, OSError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    integer: bool = False,
    low_open: bool = False,
) -> Callable[[str], int | float]:
    """An argparse type: a finite int (``1e6`` too) or float within ``low``..``high`` (``low_open``:
    above ``low``); anything else is a one-line usage error naming the range."""
    kind = "an int" if integer else "a number"
    bounds = [
        f"{'>' if low_open else '>='} {_bound(low)}" if low is not None else "",
        f"<= {_bound(high)}" if high is not None else "",
    ]
    expected = f"expected {kind} {' and '.join(b for b in bounds if b)}".rstrip()

    def convert(text: str) -> int | float:
        try:
            value: float = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}; {expected}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; {expected}")
        if integer and not value.is_integer():
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}; {expected}")
        below = low is not None and (value <= low if low_open else value < low)
        if below or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; {expected}")
        return int(value) if integer else value

    return convert


def _bound(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def names(text: str) -> list[str]:
    """An argparse type: comma-separated names, at least one, none empty (``--envs breakout,pong``)."""
    items = [v.strip() for v in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r} {'is empty' if not any(items) else 'has an empty name'}; "
                                         "expected comma-separated names, e.g. breakout,pong")  # fmt: skip
    return items


def path(text: str) -> Path:
    """An argparse type: a path that is not empty (``''`` would be the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("'' is empty; give a path")
    return Path(text)


def in_run_folder(p: Path) -> bool:
    """Whether ``p`` is a puffer-bench run folder or lies in one."""
    return any((folder / m).exists() for folder in (p, p.parent) for m in RUN_MARKERS)


def written_by(tool: str) -> Callable[[Path], bool]:
    """Whether a file is a JSON record ``tool`` wrote (its ``command`` names it): what it may replace."""

    def ours(p: Path) -> bool:
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and str(data.get("command", "")).startswith(f"python tools/{tool}")

    return ours


def check_output(out: Path, option: str = "--out", ours: Callable[[Path], bool] | None = None) -> None:
    """Refuse, before any work, an output that is a folder or would replace a file that is not one
    this tool wrote (``ours``), and never a run's own files (metrics.jsonl, config.yaml, model.pt...)."""
    if out.is_dir():
        raise ToolError(f"{option} {out} is a folder; name a file")
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_symlink():
        raise ToolError(f"{option} {out} is a symlink: refusing to write through it; name another file")
    if ours is not None and ours(out):
        return
    if in_run_folder(out):
        raise ToolError(f"{option} {out} is a run's own file: refusing to overwrite it; name another file")
    if ours is not None:
        raise ToolError(f"{option} {out} exists and is not this tool's output: refusing to overwrite it")


def finite_items(pairs: list[str], option: str) -> dict[str, float]:
    """``NAME=NUMBER`` items (``--target breakout=0.9``) as a dict of finite numbers; else one line."""
    out: dict[str, float] = {}
    for item in pairs:
        name, sep, value = item.partition("=")
        try:
            number_ = float(value)
        except ValueError:
            number_ = math.nan
        if not sep or not name or not math.isfinite(number_):
            raise ToolError(f"{option} {item!r}: expected NAME=NUMBER (a finite number), e.g. breakout=0.9")
        out[name] = number_
    return out

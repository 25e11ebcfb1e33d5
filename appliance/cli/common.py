"""What every command shares: the click group, one-line errors, option parsing and table printing."""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Iterable
from typing import Any

import click

import appliance
from appliance.errors import ApplianceError
from appliance.redact import hide_in_process_title, redact
from appliance.report_io import printable

CONTEXT = {"help_option_names": ["-h", "--help"]}
OVERRIDES = {"ignore_unknown_options": True, "allow_extra_args": True, **CONTEXT}
PROFILE_HELP = "Hardware profile from bench/profiles (e.g. cpu, 4090, h100; default: detected)."


class _Group(click.Group):
    """A click group that turns ApplianceError, bad option values and Ctrl-C into a one-line message
    and an exit code (2 for a bad value, as click gives it, without the usage text; 128 + the signal)."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        """The group's own options parsed: a Ctrl-C held while the command line was imported may land
        here, which click would answer with a bare "Aborted!"."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as e:
            import signal
            import sys

            signum = getattr(e, "signum", signal.SIGINT)
            click.echo(
                f"error: interrupted ({signal.Signals(signum).name}) before the command started: "
                "nothing was done",
                err=True,
            )
            sys.exit(128 + signum)

    def invoke(self, ctx: click.Context) -> Any:
        hide_in_process_title()  # what ps shows of a --storage URL's password
        _never_fail_to_print()
        try:
            return super().invoke(ctx)
        except ApplianceError as e:
            click.echo(f"error: {printable(redact(str(e)))}", err=True)
            ctx.exit(e.exit_code)
        except click.MissingParameter as e:  # its message is empty: click words it in format_message
            click.echo(
                f"error: {e.format_message()} (see puffer-bench {ctx.invoked_subcommand} --help)", err=True
            )
            ctx.exit(e.exit_code)
        except click.BadParameter as e:
            click.echo(f"error: {printable(_param_name(e) + redact(e.message))}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt as e:  # not click's bare "Aborted!" (a command that can save says so itself)
            import signal

            signum = getattr(e, "signum", signal.SIGINT)
            early = (
                ""
                if ctx.meta.get(_STARTED)
                else f" before {ctx.invoked_subcommand} started: nothing was done"
            )
            click.echo(f"error: interrupted ({signal.Signals(signum).name}){early}", err=True)
            ctx.exit(128 + signum)


_STARTED = "puffer-bench.started"


def _never_fail_to_print() -> None:
    """Text a file held that this terminal's encoding cannot show is printed as escapes, never a
    UnicodeEncodeError: stdout and stderr replace what they cannot encode (``\\udc80``)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


class _Command(click.Command):
    """A command that refuses an empty value of any option or argument (``--resume ''`` is no run,
    not "start a new one"; ``--container ''`` is no image, not "run here"), then notes when it
    starts (after its options are parsed)."""

    def invoke(self, ctx: click.Context) -> Any:
        for param in self.params:
            if not isinstance(
                param.type, click.types.UnprocessedParamType
            ):  # config overrides say it themselves
                _refuse_empty(ctx, param, ctx.params.get(param.name or ""))
        ctx.meta[_STARTED] = True
        return super().invoke(ctx)


def _refuse_empty(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """An option or argument given as ``''`` (or blank) is a one-line error, not "not given"."""
    if isinstance(value, tuple | list):  # nargs, multiple, or both (--pair BASE NEW, given twice)
        for item in value:
            _refuse_empty(ctx, param, item)
        return
    if isinstance(value, str) and not value.strip():
        fix = (
            f"leave {param.opts[0]} out or give a value"
            if isinstance(param, click.Option)
            else "give a value"
        )
        raise click.BadParameter(f"{_shown(value)} is empty; {fix}", ctx=ctx, param=param)


_Group.command_class = _Command
_Group.group_class = type  # subgroups (envs) are _Groups too


def _param_name(e: click.BadParameter) -> str:
    if e.param_hint:
        return f"{e.param_hint}: " if isinstance(e.param_hint, str) else f"{e.param_hint[0]}: "
    if e.param is None:
        return ""
    if isinstance(e.param, click.Argument):  # as its usage line shows it: NAMES
        return f"{(e.param.name or '').upper()}: "
    opts = getattr(e.param, "opts", None)
    return f"{opts[0] if opts else (e.param.name or '').upper()}: "


# ----------------------------------------------------------------------------- numeric options


class Number(click.ParamType):
    """An int or float option within a range; NaN, infinities and values out of range are a one-line
    error naming the option and the range (exit 2) before the command does any work.

    Every numeric option of every command is one of these (or an :class:`IntList`;
    ``tests/test_runs.py`` walks the commands to check), as every config key has a range in
    :data:`appliance.config.RANGES`. ``high`` may be a function (e.g. the usable cores), called
    when the value is checked; ``why`` names where that bound comes from.
    """

    def __init__(
        self,
        low: float | None,
        high: float | Callable[[], float] | None,
        *,
        integer: bool = False,
        low_open: bool = False,
        high_open: bool = False,
        why: str = "",
    ) -> None:
        self.low, self.high, self.integer = low, high, integer
        self.low_open, self.high_open, self.why = low_open, high_open, why
        self.name = "integer" if integer else "number"

    def range(self) -> Any:
        from appliance.config import Range

        high = self.high() if callable(self.high) else self.high
        return Range(self.low, high, low_open=self.low_open, high_open=self.high_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        kind = "an int" if self.integer else "a number"
        number = _parse(value, self.integer)
        if number is None:
            self.fail(f"{_shown(value)} is not {kind}; expected {kind} {self.range()}{self.why}", param, ctx)
        valid = self.range()
        if not valid.contains(number):
            finite = not isinstance(number, float) or math.isfinite(number)
            what = "is out of range" if finite else "is not a finite number"
            self.fail(f"{_shown(value)} {what}; expected {kind} {valid}{self.why}", param, ctx)
        return number


class IntList(click.ParamType):
    """Comma-separated ints, each within ``low``..``high`` (e.g. ``--threads 1,2,4``); ``words`` are
    values the option also takes as they are (``--buffers auto``). Empty is refused."""

    name = "ints"

    def __init__(
        self, low: int, high: int | Callable[[], int], words: tuple[str, ...] = (), why: str = ""
    ) -> None:
        self.item = Number(low, high, integer=True, why=why)
        self.words = words

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list):
            return value
        if str(value).strip().lower() in self.words:
            return str(value).strip().lower()
        items = [v.strip() for v in str(value).split(",")]
        if not any(items):
            or_words = "".join(f"{w}, " for w in self.words)
            self.fail(
                f"expected {or_words}comma-separated ints {self.item.range()}, got {_shown(value)}",
                param,
                ctx,
            )
        if not all(items):
            self.fail(f"{_shown(value)} has an empty item; expected comma-separated ints", param, ctx)
        return [self.item.convert(v, param, ctx) for v in items]


class NameList(click.ParamType):
    """Comma-separated names (``--envs breakout,squared``), at least one, none empty or twice. Whether
    each name is known is for the command to check, where it knows the names."""

    name = "names"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list):
            return value
        items = [v.strip() for v in str(value).split(",")]
        if not all(items):
            what = "is empty" if not any(items) else "has an empty name"
            self.fail(
                f"{_shown(value)} {what}; expected comma-separated names, e.g. breakout,squared", param, ctx
            )
        twice = sorted({v for v in items if items.count(v) > 1})
        if twice:
            self.fail(f"{_shown(value)} names {', '.join(twice)} twice", param, ctx)
        return items


class ProfileName(click.ParamType):
    """A hardware profile's name (``--gpu 4090``): one of bench/profiles, checked when the options
    are parsed. An empty name is refused, not taken as "detect" (which is leaving the option out)."""

    name = "profile"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from appliance.config import hardware, profile_names

        if str(value) not in profile_names():
            self.fail(str(hardware.unknown_profile(str(value))), param, ctx)
        return str(value)


PROFILE = ProfileName()


def _parse(value: Any, integer: bool) -> float | int | None:
    """``value`` as an int (whole-number floats like ``1e6`` too) or a float; None if it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and not (integer and isinstance(value, float)):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    if not integer or not math.isfinite(number):
        return number
    return int(number) if number.is_integer() else None


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text) if len(text) <= 30 else f"{text[:12]}... ({len(text)} characters)"


def usable_cores() -> int:
    from appliance.vector.sizes import usable_cores as cores

    return cores()


SECONDS = 1e6  # the longest a timed option may ask for (as bench.seconds in the config)
INT32 = 2**31 - 1
COUNT = 1_000  # repeats, rounds, runs: more than any measurement needs


def duration(low_open: bool = True) -> Number:
    """Seconds: > 0 (or >= 0 with ``low_open=False``), at most :data:`SECONDS`."""
    return Number(0, SECONDS, low_open=low_open)


def count(high: int = COUNT, low: int = 1) -> Number:
    return Number(low, high, integer=True)


def core_count() -> Number:
    """Cores to use: at most this machine's usable cores (affinity and cgroup quota)."""
    return Number(1, usable_cores, integer=True, why=" (the usable cores here)")


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(appliance.__version__, "-V", "--version", prog_name="puffer-bench")
def cli() -> None:
    """puffer-bench: how fast is this machine for reinforcement learning?

    Run a command with --help for its options. Config overrides use the form
    --section.key VALUE (e.g. --train.learning-rate 3e-4).
    """


def split_env(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``[ENV] [--section.key VALUE ...]``: the env is the first token if it is not an option."""
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)


def print_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]], left: int = 1) -> None:
    """A rich table: the first ``left`` columns left-aligned, the rest right-aligned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def check_out(
    path: str | None, option: str = "--json", inputs: Iterable[str] = (), beside: Iterable[Any] = ()
) -> None:
    """Refuse an output file that could not be written, before the work that would fill it
    (:func:`appliance.safe_files.check_output`: its folder writable with room, not a link, a folder or
    one of the command's ``inputs``)."""
    if path:
        from appliance.safe_files import check_output

        check_output(path, option, inputs=inputs, beside=beside)


def write_out(path: str, data: bytes, option: str) -> None:
    """Write a command's output atomically; a late failure (a full disk) keeps it in the temp folder
    and says where in one line (:func:`appliance.safe_files.write_or_keep`)."""
    from appliance.safe_files import write_or_keep

    write_or_keep(path, data, option)


def write_json(path: str | None, kind: str, data: dict[str, Any], option: str = "--json") -> None:
    """Optionally save a command's rows with this machine's fingerprint, atomically."""
    if path:
        import json

        from appliance.sysinfo import fingerprint

        record = {"kind": kind, "fingerprint": fingerprint(), **data}
        write_out(path, (json.dumps(record, indent=2) + "\n").encode(), option)
        click.echo(f"wrote {path}")


def env_params(name: str, num_envs: int | None = None) -> tuple[int, dict[str, Any]]:
    """The env's default num_envs and parameters from its config YAML; ``num_envs`` is checked there
    (range, and memory: a vector too big for this machine is a one-line error)."""
    from appliance.config import resolve

    cfg = resolve(env=name, overrides=["--vec.num-envs", str(num_envs)] if num_envs else [])
    return cfg.vec.num_envs, dict(cfg.env)

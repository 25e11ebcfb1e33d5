"""PufferLib 3.0's env format: the spaces its Python side declares, read from a spaces file.

A PufferLib 3.0 env folder (``ocean/NAME/``: ``NAME.h``, a ``binding.c`` that includes
``env_binding.h`` and writes ``my_init(Env*, PyObject* args, PyObject* kwargs)`` and ``my_log``)
declares its observation and action spaces and its agents per env in ``NAME.py``, which the C code
cannot see. Here they come from a small ini, the *spaces file* (``--spaces FILE``, or ``NAME.spaces.ini``
or ``spaces.ini`` beside ``binding.c``)::

    [spaces]
    observations = 2*num_resources + 4 + num_resources   ; values per agent: a number or an expression
    obs_dtype = float32                                   ; float32 | uint8 (the struct's element)
    actions = multidiscrete 9 5                           ; discrete N | multidiscrete N N ... | box K
    agents = num_agents                                   ; agents per env (default 1)

    [kwargs]                                              ; optional: kwargs its NAME.py passed to C
    num_agents = num_atoms                                ; computed from the ini's [env] keys

Expressions are arithmetic (``+ - * // % ( )``, ``x[i]``) over the env's ``[env]`` keys. A key a
space depends on is fixed at build time (the buffers' shapes follow from it): its range is that value.
:func:`read` checks the file and returns what the build needs (appliance/pufferlib_envs.build).
"""

from __future__ import annotations

import ast
import configparser
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ConfigError
from appliance.report_io import read_bounded

OBS_DTYPES = {"float32": 4, "uint8": 1}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}  # fmt: skip
FORMAT_HINT = "see docs/envs.md, 'PufferLib 3.0 envs'"


@dataclass(frozen=True)
class Spaces:
    """One env's spaces as its build compiles them."""

    path: Path
    obs_size: int
    obs_dtype: str
    action_sizes: tuple[int, ...]  # every size 1: a Box of that many floats (the 4.0 layer's rule)
    agents: int
    kwargs: dict[str, float]  # computed kwargs passed to my_init besides the ini's
    fixed: frozenset[str]  # [env] keys the spaces depend on: fixed at build time

    def defines(self) -> list[str]:
        sizes = ",".join(str(n) for n in self.action_sizes)
        return [f"-DCOMPAT3_OBS_SIZE={self.obs_size}", f"-DCOMPAT3_OBS_ITEMSIZE={OBS_DTYPES[self.obs_dtype]}",
                f"-DCOMPAT3_NUM_ATNS={len(self.action_sizes)}", f"-DCOMPAT3_ACT_SIZES={{{sizes}}}",
                f"-DCOMPAT3_AGENTS={self.agents}"]  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {"file": str(self.path), "obs_size": self.obs_size, "obs_dtype": self.obs_dtype,
                "action_sizes": list(self.action_sizes), "agents": self.agents, "kwargs": self.kwargs,
                "fixed": sorted(self.fixed)}  # fmt: skip


def is_format3(binding: str) -> bool:
    """True for a binding.c in the 3.0 format (it includes env_binding.h)."""
    return "env_binding.h" in binding


def find(folder: Path, name: str, given: str | Path | None) -> Path:
    """The spaces file: ``given``, else ``NAME.spaces.ini`` or ``spaces.ini`` beside binding.c."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise ConfigError(f"--spaces {given}: no such file")
        return path
    for candidate in (folder / f"{name}.spaces.ini", folder / "spaces.ini"):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"{folder}/binding.c is in PufferLib 3.0's format, whose spaces its NAME.py declares: give them "
        f"in a spaces file, `puffer-bench envs build {folder} --spaces FILE` (or {name}.spaces.ini beside "
        f"binding.c; {FORMAT_HINT})"
    )


class _Reads(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)


def evaluate(text: str, values: dict[str, Any], where: str) -> tuple[Any, set[str]]:
    """The value of an arithmetic expression over ``values`` and the names it read; a one-line
    ConfigError for anything else (a call, an unknown name, a division by zero)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ConfigError(f"{where}: {text.strip()!r} is not an expression") from None
    reads = _Reads()
    reads.visit(tree)

    def value(node: ast.AST) -> Any:
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                known = ", ".join(sorted(values)) or "none"
                raise ConfigError(
                    f"{where}: {node.id!r} is not a key of the env's ini [env] (its keys: {known})"
                )
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
                raise ConfigError(f"{where}: {text.strip()!r} computes with a value that is not a number")
            try:
                return _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise ConfigError(f"{where}: {text.strip()!r} divides by zero") from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.Subscript):
            seq, index = value(node.value), value(node.slice)
            if (
                not isinstance(seq, list | tuple)
                or not isinstance(index, int)
                or not -len(seq) <= index < len(seq)
            ):
                raise ConfigError(f"{where}: {text.strip()!r} indexes what is not a list, or past its end")
            return seq[index]
        raise ConfigError(
            f"{where}: {text.strip()!r}: only numbers, [env] keys and + - * // % ( ) [i] are read"
        )

    return value(tree.body), reads.names


def _whole(value: Any, where: str, low: int = 1) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{where} is {value!r}: it must be a whole number >= {low}")
    return value


def read(path: Path, env: dict[str, Any]) -> Spaces:
    """The spaces file at ``path`` evaluated over the ini's ``[env]`` values ``env``."""
    parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    text = read_bounded(path, "spaces file", ConfigError, 2**20).decode(errors="replace")
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as e:
        raise ConfigError(f"{path}: not a readable ini: {' '.join(str(e).split())}") from None
    if not parser.has_section("spaces"):
        raise ConfigError(f"{path} has no [spaces] section ({FORMAT_HINT})")
    section = parser["spaces"]
    unknown = sorted(set(section) - {"observations", "obs_dtype", "actions", "agents"})
    if unknown:
        raise ConfigError(f"{path}: [spaces] has no key {unknown[0]!r} (its keys: observations, obs_dtype, "
                          "actions, agents)")  # fmt: skip
    for key in ("observations", "actions"):
        if key not in section:
            raise ConfigError(f"{path}: [spaces] lacks {key!r} ({FORMAT_HINT})")
    fixed: set[str] = set()

    def whole(key: str, default: str | None = None) -> int:
        raw = section.get(key, default)
        result, names = evaluate(raw, env, f"{path} [spaces] {key}")
        fixed.update(names)
        return _whole(result, f"{path} [spaces] {key}")

    obs_size = whole("observations")
    agents = whole("agents", "1")
    dtype = section.get("obs_dtype", "float32").strip()
    if dtype not in OBS_DTYPES:
        raise ConfigError(f"{path} [spaces] obs_dtype is {dtype!r}: float32 or uint8")
    words = section["actions"].split()
    kind, args = (words[0].lower(), words[1:]) if words else ("", [])
    where = f"{path} [spaces] actions"
    sizes: list[int] = []
    for arg in args:
        result, names = evaluate(arg, env, where)
        fixed.update(names)
        sizes.append(_whole(result, where))
    discrete = (kind == "discrete" and len(sizes) == 1) or (kind == "multidiscrete" and len(sizes) >= 1)
    if discrete and all(n >= 2 for n in sizes):
        action_sizes = tuple(sizes)
    elif kind == "box" and len(sizes) == 1:
        action_sizes = (1,) * sizes[0]
    else:
        raise ConfigError(f"{where} is {section['actions']!r}: 'discrete N' (N >= 2), 'multidiscrete N N ...' "
                          "or 'box K'")  # fmt: skip
    kwargs: dict[str, float] = {}
    if parser.has_section("kwargs"):
        for key, raw in parser["kwargs"].items():
            result, names = evaluate(raw, env, f"{path} [kwargs] {key}")
            if not isinstance(result, int | float) or isinstance(result, bool):
                raise ConfigError(f"{path} [kwargs] {key} is {result!r}: kwargs are numbers")
            fixed.update(names)
            kwargs[key] = float(result)
    return Spaces(path, obs_size, dtype, action_sizes, agents, kwargs, frozenset(fixed))

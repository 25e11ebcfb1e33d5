"""The env contract, checked where a Python env's output enters: what ``reset`` and ``step`` return,
observations against their space, rewards, flags, infos, and the spaces themselves. A broken rule is
one line: an :class:`~appliance.errors.EnvContractError` naming the env, the call and the rule."""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from appliance.config.families import describe_space as describe_space  # the one short form of a space
from appliance.emulation.codecs import SpaceCodec, _get
from appliance.errors import EnvContractError

_NUMBERS = frozenset({float, int, np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8})
_INTS = frozenset({int, np.int64, np.int32, np.int16, np.int8, np.uint8})
_BOOLS = frozenset({bool, np.bool_})
_UNPACK = re.compile(r"values to unpack \(expected 5, got (\d+)\)")


def env_name(env: Any) -> str:
    """The name errors give an env: its Gymnasium id, else its (unwrapped) class name."""
    spec = getattr(env, "spec", None)
    if getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


def _what(value: Any) -> str:
    """A value described for an error: its type, and shape and dtype for arrays."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"an ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def _step_arity(
    name: str, call: str, result: Any, expected: str = "5: (observation, reward, terminated, truncated, info)"
) -> EnvContractError:
    if isinstance(result, tuple | list) and len(result) == 4:
        got = "4 values (observation, reward, done, info: the old gym API)"
    elif isinstance(result, tuple | list):
        got = f"{len(result)} values"
    else:
        got = _what(result)
    return EnvContractError(f"{name}: {call} returned {got}; it must return {expected}")


def _reward(name: str, call: str, reward: Any, who: str = "") -> float:
    """One reward as a float, or the broken rule: one finite number (a 0-d array is one number)."""
    if type(reward) in _NUMBERS:  # numpy scalars, ints
        r = float(reward)
        if not r - r:
            return r
    value = reward
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value.item()
    elif isinstance(value, np.ndarray):
        raise EnvContractError(
            f"{name}: {call} returned a reward{who} of shape {value.shape}; a reward must be one number"
        )
    if not isinstance(value, float | int | np.floating | np.integer):
        raise EnvContractError(
            f"{name}: {call} returned a reward{who} of type {type(reward).__name__}; a reward must be one number"
        )
    r = float(value)
    if r - r:  # NaN or +-Inf: x - x is 0.0 for every finite x
        raise EnvContractError(f"{name}: {call} returned a reward{who} of {r}; rewards must be finite")
    return r


def _flag(name: str, call: str, key: str, value: Any, who: str = "") -> bool:
    """terminated or truncated: a bool (numpy's too, and a 0-d bool array)."""
    if type(value) in _BOOLS:
        return bool(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype == np.bool_:
        return bool(value)
    shown = f" ({value!r})" if isinstance(value, int | float | np.number) else ""
    raise EnvContractError(
        f"{name}: {call} returned {key}{who} of type {type(value).__name__}{shown}; it must be a bool"
    )


def _info(name: str, call: str, info: Any) -> None:
    if not isinstance(info, dict):
        raise EnvContractError(
            f"{name}: {call} returned info of type {type(info).__name__}; it must be a dict"
        )


def _reset_pair(name: str, result: Any) -> Any:
    """``reset()``'s (observation, info), or the broken rule."""
    if not isinstance(result, tuple) or len(result) != 2:
        got = (
            f"a {type(result).__name__} of {len(result)} items"
            if isinstance(result, tuple)
            else _what(result) + (" (a bare observation?)" if result is not None else "")
        )
        raise EnvContractError(f"{name}: reset() returned {got}; it must return (observation, info)")
    if not isinstance(result[1], dict):
        raise EnvContractError(
            f"{name}: reset() returned (observation, {_what(result[1])}); the second item must be the info dict"
        )
    return result[0]


def check_observation(name: str, call: str, codec: SpaceCodec, sample: Any, who: str = "") -> None:
    """Every leaf of ``sample`` present, of the space's shape, and of a dtype that casts to the
    space's (same kind: float64 into float32 is fine, floats into uint8 are not)."""
    space = codec.space
    for leaf in codec.leaves:
        where = "".join(f"[{key!r}]" for key in leaf.path)
        try:
            value = _get(sample, leaf.path)
        except (KeyError, IndexError, TypeError):
            raise EnvContractError(
                f"{name}: {call} returned an observation{who} without {where or 'a value'}; its observation_space is "
                f"{describe_space(space)}"
            ) from None
        try:
            array = np.asarray(value)
        except Exception:  # ragged lists and the like
            array = np.asarray(None)
        part = f"an observation{who}{where and ' whose ' + where}"
        expected = describe_space(leaf.space) if where else describe_space(space)
        if array.dtype.kind not in "biuf":
            raise EnvContractError(
                f"{name}: {call} returned {part} of type {type(value).__name__}; "
                f"its observation_space{where} is {expected}"
            )
        if array.shape != leaf.shape:
            raise EnvContractError(
                f"{name}: {call} returned {part} of shape {array.shape}; its observation_space{where} is {expected}"
            )
        if not np.can_cast(array.dtype, leaf.dtype, "same_kind"):
            raise EnvContractError(
                f"{name}: {call} returned {part} of dtype {array.dtype}, which does not cast to "
                f"{leaf.dtype} without losing values; its observation_space{where} is {expected}"
            )


def _gymnasium_frame(error: BaseException) -> str | None:
    """Where in Gymnasium's own wrappers or env checker ``error`` was raised (None: elsewhere). Those
    raise on an env's bad output before this module sees it (TimeLimit unpacks ``step`` into 5)."""
    tb, last = error.__traceback__, None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    if last is None:
        return None
    path = last.replace("\\", "/")
    for part, what in (
        ("gymnasium/wrappers/", "wrappers reject"),
        ("gymnasium/utils/passive_env_checker", "env checker rejects"),
    ):
        if part in path:
            return what
    return None


def _translate(name: str, call: str, error: Exception) -> Exception:
    """An error Gymnasium's wrappers raised on the env's output, as the contract it broke."""
    where = _gymnasium_frame(error)
    if where is None:
        return error
    unpack = _UNPACK.search(str(error))
    if unpack and call == "step()":
        return _step_arity(name, call, (None,) * int(unpack.group(1)))
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return EnvContractError(f"{name}: {call} returned what Gymnasium's {where}: {first}")


_PZ_STEP = ("observations", "rewards", "terminations", "truncations", "infos")
_GYM_ERRORS = (AssertionError, ValueError, TypeError, gymnasium.error.Error)


def _space(name: str, kind: str, space: Any) -> spaces.Space:
    if not isinstance(space, spaces.Space):
        raise EnvContractError(
            f"{name}: {kind} is {_what(space)}, not a gymnasium.spaces.Space; set it in __init__"
        )
    return space

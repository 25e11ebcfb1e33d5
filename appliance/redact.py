"""No secret on disk or screen: the one redaction every writer of text the user may see goes through.

A command line can carry a secret: ``--storage postgresql://USER:PASSWORD@HOST/DB``, an API key or a
token given as an option or an override, and the environment holds more (``WANDB_API_KEY``,
``PGPASSWORD``). :func:`redact` replaces each with ``***`` in any text: a URL's password (the user
stays), the value after a ``password=``/``api_key=``/``token=``/``secret=`` key or a ``--...-password``
/ ``--...-key`` / ``--...-token`` option, and the value of any environment variable whose name says it
is a secret, wherever it appears. Locks (:func:`command_line`), logs, reports, configs, one-line errors
and the process title (:func:`hide_in_process_title`) use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Any

HIDDEN = "***"

# scheme://user:password@  (the password is anything up to the last @ before the host part)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)(?P<secret>[^\s'\"]*)@")
_SECRET_WORD = r"(?:pass(?:word|wd)?|pwd|api[_\-]?key|access[_\-]?key|secret(?:[_\-]?key)?|token|auth)"
# key=value / key: value, as in a query string, a DSN (password=...) or YAML
_KEY_VALUE = re.compile(
    rf"(?P<head>(?<![A-Za-z0-9])[A-Za-z0-9_\-.]*{_SECRET_WORD}\s*(?:=|:\s)\s*['\"]?)"
    r"(?P<secret>[^\s&'\",;}]+)",
    re.IGNORECASE,
)
# --some-api-key VALUE / --train.token VALUE (the value as the next word)
_OPTION = re.compile(
    rf"(?P<head>--[A-Za-z0-9_\-.]*{_SECRET_WORD}\s+['\"]?)(?P<secret>(?!--)[^\s'\"]+)",
    re.IGNORECASE,
)
_SECRET_ENV = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|ACCESS_KEY|CREDENTIAL|_KEY$", re.IGNORECASE)
MIN_ENV_SECRET = 6  # shorter values (a "1", "true") are no secret and would redact ordinary text


def _env_secrets() -> list[str]:
    values = {
        value
        for name, value in os.environ.items()
        if _SECRET_ENV.search(name) and len(value) >= MIN_ENV_SECRET and not value.isspace()
    }
    return sorted(values, key=len, reverse=True)


def _spans(text: str) -> list[tuple[int, int]]:
    """Where the secrets of ``text`` are: merged (start, end) spans."""
    spans = [m.span("secret") for rule in (_URL_PASSWORD, _OPTION, _KEY_VALUE) for m in rule.finditer(text)]
    for value in _env_secrets():
        at = text.find(value)
        while at >= 0:
            spans.append((at, at + len(value)))
            at = text.find(value, at + len(value))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact(text: str) -> str:
    """``text`` with every secret it holds replaced by ``***`` (see the module's docstring)."""
    if not text:
        return text
    out, last = [], 0
    for start, end in _spans(text):
        if text[start:end] != HIDDEN:
            out += [text[last:start], HIDDEN]
            last = end
    return "".join([*out, text[last:]])


_SECRET_KEY = re.compile(rf"(?:^|[_\-.]){_SECRET_WORD}$", re.IGNORECASE)


def secret_key(name: str) -> bool:
    """Whether a config key names a secret (``api_key``, ``wandb_token``, ``password``, ``secret``)."""
    return bool(_SECRET_KEY.search(str(name)))


def redact_tree(data: Any) -> Any:
    r"""A copy of a config (dicts, lists, values) as it may be written: the value of a key that names a
    secret is ``***``, and every string is :func:`redact`\ ed (a URL's password)."""
    if isinstance(data, dict):
        return {
            k: HIDDEN if secret_key(k) and isinstance(v, str) and v else redact_tree(v)
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return type(data)(redact_tree(v) for v in data)
    if isinstance(data, str):
        return redact(data)
    return data


def redact_args(args: list[str]) -> list[str]:
    r"""Command-line tokens as they may be stored: the value after an option that names a secret
    (``--env.api-key KEY``) is ``***``, and every token is :func:`redact`\ ed (``--x.token=KEY``, a URL)."""
    out: list[str] = []
    hide_next = False
    for token in args:
        if hide_next and not token.startswith("--"):
            out.append(HIDDEN)
            hide_next = False
            continue
        hide_next = (
            token.startswith("--") and "=" not in token and secret_key(token.lstrip("-").replace("-", "_"))
        )
        out.append(redact(token))
    return out


def hidden_values(data: Any, path: str = "") -> list[str]:
    """The dotted keys of ``data`` whose value is ``***``: secrets a saved config does not hold."""
    if isinstance(data, dict):
        return [k for key, v in data.items() for k in hidden_values(v, f"{path}.{key}" if path else str(key))]
    return [path] if data == HIDDEN else []


def command_line(argv: list[str] | None = None) -> str:
    """This process's command (``puffer-bench ARGS``) as a lock or a report records it: redacted."""
    args = sys.argv[1:] if argv is None else argv
    return redact(" ".join(["puffer-bench", *args]))


def hide_in_process_title() -> None:
    """Overwrite the secrets in this process's own command line as ``ps`` and ``/proc/PID/cmdline``
    show it (the kernel reads the process's argument area; Python keeps its own copy in ``sys.argv``).
    Linux only; a no-op where the area cannot be written."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
        if not 0 < start < end or end - start > 2**20:
            return
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            area = mem.read(end - start)
            text = area.replace(b"\0", b" ").decode("latin-1")  # one byte a character: spans are offsets
            new = bytearray(area)
            for a, b in _spans(text):
                new[a:b] = b"*" * (b - a)
            if new != area:
                mem.seek(start)
                mem.write(bytes(new))

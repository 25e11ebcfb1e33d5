"""The two sides of an A/B run (:mod:`appliance.compare.ab`): a variant parsed from its spec, and
how each kind measures one round.

Config variants (``base``, overrides, a config file) run the suite in this process with the
variant's config layers (:class:`InProcess`); commits and images run ``puffer-bench run --repeats 1``
per round in a fresh process (:class:`Subprocess`). A commit is checked out in a temporary git
worktree whose C envs are built in place; the worktree is removed (and pruned from the repository)
on every exit path, and one that a killed run left behind is removed by the next ``ab``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance import lifeline
from appliance.errors import ConfigError, ReportError

TMP_PREFIX = "puffer-ab-"  # each commit variant's folder in the temp folder: <tmp>/puffer-ab-*/tree
OWNER = "owner.lock"  # locked while the ab run that made the folder lives

# The CLI of a commit's worktree, whichever layout that commit has (appliance/cli a module or a package).
CLI_MAIN = "import sys; from appliance.cli import main; sys.argv[0] = 'puffer-bench'; main()"


@dataclass
class Variant:
    """One side of an A/B run, parsed from its command-line spec."""

    spec: str
    kind: str  # "config", "git" or "image"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    config_file: str | None = None
    ref: str | None = None
    image: str | None = None

    def describe(self) -> str:
        if self.kind == "git":
            return f"commit {self.ref}"
        if self.kind == "image":
            return f"image {self.image}"
        if self.config_file:
            return f"config file {self.config_file}"
        return "current config" if not self.overrides else f"overrides {self.spec}"


def parse_variant(spec: str) -> Variant:
    """``base``, ``section.key=value,...``, ``FILE.yaml``, ``git:REF`` or ``image:NAME``."""
    from appliance.config import parse_overrides

    text = spec.strip()
    if text.startswith("git:"):
        if not text[4:]:
            raise ConfigError(f"variant {spec!r}: git: needs a commit, e.g. git:HEAD~1")
        return Variant(spec, "git", ref=text[4:])
    if text.startswith("image:"):
        if not text[6:]:
            raise ConfigError(f"variant {spec!r}: image: needs an image name, e.g. image:puffer-bench:cpu")
        return Variant(spec, "image", image=text[6:])
    if text in ("base", ""):
        return Variant(spec, "config")
    if text.endswith((".yaml", ".yml")):
        if not Path(text).is_file():
            raise ConfigError(f"variant {spec!r}: no such config file")
        return Variant(spec, "config", config_file=text)
    if "=" in text:
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        bad = [p for p in pairs if "=" not in p]
        if bad:
            raise ConfigError(f"variant {spec!r}: {bad[0]!r} is not section.key=value")
        return Variant(spec, "config", overrides=parse_overrides([f"--{p}" for p in pairs]))
    raise ConfigError(
        f"variant {spec!r} is none of: base, section.key=value[,...], FILE.yaml, git:REF, image:NAME"
    )


# ---------------------------------------------------------------------- running one round


def _suite_runner_class() -> type:
    from appliance.bench.suite.steps import SuiteRunner

    class VariantRunner(SuiteRunner):
        """A SuiteRunner whose env configs get the variant's config file and overrides on top."""

        variant: Variant

        def config(self, env: str, overrides: dict[str, Any] | None = None) -> Any:
            from appliance.config import resolve

            key = env if not overrides else f"{env}+{sorted(overrides.items())}"
            if key not in self.configs:
                layer = {s: dict(v) for s, v in self.variant.overrides.items()}
                for dotted, value in (overrides or {}).items():
                    section, _, name = str(dotted).partition(".")
                    layer.setdefault(section, {})[name] = value
                self.configs[key] = resolve(
                    env=env, profile=self.profile, config_file=self.variant.config_file, overrides=layer
                )
            return self.configs[key]

    return VariantRunner


def variant_seed(variant: Variant) -> int:
    """The ``train.seed`` a config variant sets (its overrides, else its file), else the defaults'."""
    from appliance.config import defaults
    from appliance.config.files import read_yaml

    seed = variant.overrides.get("train", {}).get("seed")
    if seed is None and variant.config_file:
        train = read_yaml(Path(variant.config_file)).get("train")
        seed = train.get("seed") if isinstance(train, dict) else None
    try:
        return int(defaults()["train"]["seed"] if seed is None else seed)
    except (TypeError, ValueError):
        raise ConfigError(f"variant {variant.spec!r}: train.seed {seed!r} is not an integer") from None


class InProcess:
    """Config variants: the suite runs in this process with the variant's config layers. Round k's
    training steps train with seed ``train.seed + k`` (both sides alike), so a time-to-score ratio
    over the rounds spans seeds as well as the machine's drift; the speed steps do not depend on it."""

    def __init__(
        self, variant: Variant, suite: dict[str, Any], fingerprint: dict[str, Any], options: dict[str, Any]
    ):
        self.variant, self.suite, self.fp, self.options = variant, suite, fingerprint, options
        self.seed = variant_seed(variant)
        self.cls = _suite_runner_class()
        self.cls.variant = variant

    def prepare(self) -> None:
        pass  # a bad override fails in round 1 of its side, before the other side has run much

    def round(self, index: int) -> dict[str, Any]:
        from appliance.bench.report import Report

        report = Report(
            {"name": self.suite["name"], "definition": self.suite}, {"name": self.options["profile"]},
            self.fp, {}, seed=self.seed + index, repeats=1,
        )  # fmt: skip
        runner = self.cls(
            self.suite,
            self.options["profile"],
            report,
            1,
            self.options.get("envs"),
            self.options.get("seconds"),
        )
        runner.run_all()
        report.set("config", runner.resolved_configs())
        return report.data

    def close(self) -> None:
        pass


def _run_args(options: dict[str, Any], out: Path) -> list[str]:
    args = [
        "run",
        "--suite",
        options["suite_arg"],
        "--repeats",
        "1",
        "--no-plots",
        "--gpu",
        options["profile"],
    ]
    if options.get("envs"):
        args += ["--envs", ",".join(options["envs"])]
    if options.get("seconds"):
        args += ["--seconds", str(options["seconds"])]
    return [*args, "--out", str(out)]


def _read_round(out: Path, profile: str, what: str) -> dict[str, Any]:
    from appliance.bench import report as rpt

    found = sorted((out / profile).glob("*.json"))
    if len(found) != 1:
        raise ReportError(f"{what} wrote {len(found)} reports to {out / profile}, expected one")
    return rpt.load(found[0])


class Subprocess:
    """Commit and image variants: ``puffer-bench run --repeats 1`` in a fresh process per round (its
    training steps train every round with that config's own ``train.seed``)."""

    def __init__(
        self,
        variant: Variant,
        options: dict[str, Any],
        execute: Callable[..., Any] = subprocess.run,
        root: Path | None = None,
    ) -> None:
        self.variant, self.options, self.execute = variant, options, execute
        self.root = root
        self.tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        self.owner = open(self.tmp / OWNER, "w")  # noqa: SIM115 (held, locked, for the run's lifetime)
        fcntl.flock(self.owner, fcntl.LOCK_EX)
        self.tree: Path | None = None

    def _git(self, *args: str) -> None:
        try:
            result = self.execute(["git", "-C", str(self.root), *args], capture_output=True, text=True)
        except FileNotFoundError:
            raise ConfigError("git: variants need git on PATH; none was found") from None
        if result.returncode != 0:
            raise ConfigError(f"git {' '.join(args)} failed: {(result.stderr or '').strip()[:300]}")

    def prepare(self) -> None:
        if self.variant.kind != "git":
            return
        if self.root is None:
            from appliance.paths import checkout_root

            self.root = checkout_root()
            if self.root is None:
                raise ConfigError("git: variants need puffer-bench to run from a git checkout")
        self._remove_abandoned()
        self.tree = self.tmp / "tree"
        self._git("worktree", "add", "--detach", str(self.tree), str(self.variant.ref))
        build = self.execute(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            cwd=self.tree,
            capture_output=True,
            text=True,
            preexec_fn=lifeline.dies_with_parent(),
        )
        if build.returncode != 0:
            raise ConfigError(
                f"building the C envs of {self.variant.ref} failed: {(build.stderr or '').strip()[-300:]}"
            )

    def round(self, index: int) -> dict[str, Any]:
        out = self.tmp / f"round-{index}"
        args = _run_args(self.options, out)
        if self.variant.kind == "git":
            assert self.tree is not None
            env = {**os.environ, "PYTHONPATH": str(self.tree)}
            result = self.execute(
                [sys.executable, "-c", CLI_MAIN, *args],
                cwd=self.tree,
                env=env,
                capture_output=True,
                text=True,
                preexec_fn=lifeline.dies_with_parent(),  # an ab killed outright takes its round along
            )
            if result.returncode != 0:
                tail = (result.stderr or result.stdout or "").strip().splitlines()[-1:]
                raise ConfigError(f"commit {self.variant.ref}: puffer-bench run failed: {' '.join(tail)}")
        else:
            from appliance.container import run_in_container

            code = run_in_container(str(self.variant.image), args[:-2], results=out)
            if code != 0:
                raise ConfigError(f"image {self.variant.image}: puffer-bench run exited with {code}")
        return _read_round(out, self.options["profile"], self.variant.describe())

    def _remove_abandoned(self) -> None:
        """Worktrees an ab run that was killed (SIGKILL, a crash) left in the temp folder: their
        owner lock is free. Removed, and pruned from the repository."""
        for folder in self.tmp.parent.glob(f"{TMP_PREFIX}*"):
            if folder == self.tmp or not (folder / OWNER).is_file():
                continue
            try:
                with open(folder / OWNER) as f:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken: its run is gone
                    shutil.rmtree(folder, ignore_errors=True)
            except OSError:
                continue  # held: a live ab run's
        with contextlib.suppress(Exception):
            self._git("worktree", "prune")

    def close(self) -> None:
        """Remove the worktree and the temp folder, and prune the repository's record of it."""
        if self.tree is not None and self.root is not None:
            with contextlib.suppress(Exception):
                self._git("worktree", "remove", "--force", str(self.tree))
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.tree is not None and self.root is not None:
            with contextlib.suppress(Exception):
                self._git("worktree", "prune")  # also when the removal above failed half-way
        self.owner.close()

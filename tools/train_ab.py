"""Training speed of two variants of one build, interleaved (A B, B A, ...) on this machine.

A variant is a set of environment variables and train options, e.g. the CPU kernels against the
torch reference they replace:

    python tools/train_ab.py breakout --a PUFFER_KERNELS=reference --b PUFFER_KERNELS=auto \\
        --rounds 3 --stop-steps 3.2e6 --out results/cpu/speed/host-kernels-breakout.json

and may be a revision of the repository (``--a-rev``, ``--b-rev``: a commit, built in a git worktree
of its own, its C extensions compiled in place there), e.g. a change against the commit before it:

    python tools/train_ab.py breakout --a-rev HEAD~1 --b-rev HEAD --out ab.json

A variant may also take train options of its own (``--a-arg``, ``--b-arg``), e.g. two policy sizes:

    python tools/train_ab.py breakout --b-arg=--policy.hidden-size=64 --out ab.json

Each window is `puffer-bench train ENV --stop-steps N` on the env's defaults (plus `--train-arg`s,
the same for both, and the variant's own), timed from its second logged epoch to its last (start-up
and the first epoch's allocation left out), with the noise guard's per-CPU speed check before and
after it and the load of other processes during it. Writes the agent-steps/s of each window, the
time each phase took, the per-round ratios B/A and their median. Compare variants only within one
report.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

REPO = Path(__file__).resolve().parent.parent


def parse_variant(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: a variant is NAME=VALUE environment settings, got {item!r}")
        env[key] = value
    return env


def split_options(items: list[str]) -> list[str]:
    """``--train-arg``-style items as train's argv: ``--policy.hidden-size=64`` is two words."""
    return [word for item in items for word in item.split("=", 1)]


def resolve(rev: str, flag: str) -> str:
    """``rev``'s full commit hash; a name that is not a commit here is one line naming ``flag``."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise tool_cli.ToolError(f"{flag} {rev}: git is not installed (it checks the commit out)") from None
    if proc.returncode != 0:
        raise tool_cli.ToolError(f"{flag} {rev}: not a commit of this repository")
    return proc.stdout.strip()


def checkout(commit: str, where: Path) -> Path:
    """A git worktree of ``commit`` at ``where`` with its extensions built in place."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), commit],
        capture_output=True,
        check=True,
    )
    print(f"building {commit[:12]} in {where}", flush=True)
    proc = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=where, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise tool_cli.ToolError(f"building {commit[:12]} failed:\n{proc.stderr[-2000:]}")
    return where


def window(
    env_name: str,
    variant: dict[str, str],
    steps: int,
    train_args: list[str],
    scratch: Path,
    tree: Path = REPO,
) -> dict[str, Any]:
    """One training run of the variant from the checkout ``tree`` (its ``appliance`` comes first on
    the path: the script runs there); its steady agent-steps/s and phase seconds."""
    from appliance.lifeline import dies_with_parent
    from appliance.measure import noise

    run = scratch / "run"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [sys.executable, "-c", "from appliance.cli import main; main()", "train", env_name, "--no-dashboard",
           "--run-id", run.name, "--train.data-dir", str(scratch), "--stop-steps", str(steps), *train_args]  # fmt: skip
    before, sampler = noise.gate_check(), noise.Sampler()
    sampler.sample()
    proc = subprocess.run(
        cmd,
        cwd=tree,
        env={**os.environ, **variant},
        capture_output=True,
        text=True,
        preexec_fn=dies_with_parent(),
    )
    load = sampler.sample() or {}
    if proc.returncode != 0:
        raise SystemExit(f"error: the training run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    from appliance.safe_files import read_json_lines, skipped_note

    rows, skipped = read_json_lines(run / "metrics.jsonl", "run's metrics")
    if skipped:
        print(f"warning: {skipped_note(run / 'metrics.jsonl', skipped)}", file=sys.stderr)
    if len(rows) < 3:
        raise SystemExit(f"error: {len(rows)} epochs logged; ask for more --stop-steps (at least 3 epochs)")
    first, last = rows[1], rows[-1]
    sps = (last["global_step"] - first["global_step"]) / (last["uptime"] - first["uptime"])
    phases = {
        k.removeprefix("time/"): last[k] - first[k]
        for k in last
        if k.startswith("time/") and "/buffer" not in k
    }
    return {"sps": sps, "epochs": len(rows) - 1, "phases_s": phases, "check_before": before,
            "check_after": noise.gate_check(), "others_cores": load.get("others_cores"),
            "steal_cores": load.get("steal_cores")}  # fmt: skip


def busy_reason(windows: dict[str, list[dict]]) -> str | None:
    """Why the windows do not make an idle figure, by the noise guard's thresholds: other processes'
    load or the hypervisor's steal (a vCPU given to another guest slows a window as much) over its
    limit in any window; None where neither was."""
    from appliance.measure.noise import thresholds

    limits = dict(zip(("others_cores", "steal_cores"), thresholds(), strict=True))
    words = {"others_cores": "other processes were busy", "steal_cores": "the hypervisor stole CPU time"}
    reasons = []
    for key, limit in limits.items():
        seen = [w[key] for ws in windows.values() for w in ws if w.get(key) is not None]
        if seen and max(seen) > limit:
            reasons.append(f"{words[key]} (up to {max(seen):.2f} cores, the limit {limit:.2f})")
    return "; ".join(reasons) or None


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.splitlines()[0])
    ap.add_argument("env")
    ap.add_argument("--a", action="append", default=[], metavar="NAME=VALUE", help="variant A's environment")
    ap.add_argument("--b", action="append", default=[], metavar="NAME=VALUE", help="variant B's environment")
    ap.add_argument("--a-rev", metavar="REV", help="variant A's commit (default: this checkout as it is)")
    ap.add_argument("--b-rev", metavar="REV", help="variant B's commit (default: this checkout as it is)")
    ap.add_argument("--rounds", type=tool_cli.number(1, 1000, integer=True), default=3)
    ap.add_argument("--stop-steps", type=tool_cli.number(1, 2**63 - 1, integer=True), default=3_200_000,
                    help="agent-steps per window (at least 3 epochs)")  # fmt: skip
    ap.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                    help="a train option for both sides, e.g. --train-arg=--policy.hidden-size=64")  # fmt: skip
    ap.add_argument(
        "--a-arg", action="append", default=[], metavar="ARG", help="a train option for variant A alone"
    )
    ap.add_argument(
        "--b-arg", action="append", default=[], metavar="ARG", help="a train option for variant B alone"
    )
    ap.add_argument("--out", type=tool_cli.path, required=True)
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a, argv))


def run_command(a: argparse.Namespace, argv: list[str] | None) -> None:
    tool_cli.check_output(a.out, ours=tool_cli.written_by("train_ab"))
    commits = {
        side: None if rev is None else resolve(rev, f"--{side.lower()}-rev")
        for side, rev in (("A", a.a_rev), ("B", a.b_rev))
    }
    sys.path.insert(0, str(REPO))
    from appliance.errors import ApplianceError
    from appliance.safe_files import check_output, write_or_keep
    from appliance.sysinfo import fingerprint

    try:  # before the rounds, not after them
        check_output(a.out, "--out")
    except ApplianceError as e:
        raise SystemExit(f"error: {e}") from None
    variants = {"A": parse_variant(a.a), "B": parse_variant(a.b)}
    train_args = split_options(a.train_arg)
    own_args = {"A": split_options(a.a_arg), "B": split_options(a.b_arg)}
    windows: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    scratch = Path(tempfile.mkdtemp(prefix="train-ab-"))
    trees: dict[str, Path] = {"A": REPO, "B": REPO}
    try:
        for side, commit in commits.items():
            if commit is not None:
                trees[side] = checkout(commit, scratch / f"tree-{side}")
        for r in range(a.rounds):
            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                w = window(
                    a.env, variants[side], a.stop_steps, train_args + own_args[side], scratch, trees[side]
                )
                windows[side].append(w)
                print(f"round {r + 1}/{a.rounds} {side}: {w['sps']:,.0f} agent-steps/s "
                      f"(others' load {w['others_cores'] or 0:.2f} cores, the hypervisor's steal "
                      f"{w.get('steal_cores') or 0:.2f})", flush=True)  # fmt: skip
    finally:
        for side in ("A", "B"):
            if commits[side] is not None:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees[side])],
                    capture_output=True,
                )
        shutil.rmtree(scratch, ignore_errors=True)
        if any(commits.values()):  # only worktrees need git: a machine without it times variants too
            subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True)
    ratios = [b["sps"] / a_["sps"] for a_, b in zip(windows["A"], windows["B"], strict=True)]
    why_busy = busy_reason(windows)
    busy = why_busy is not None
    result = {
        "command": "python tools/train_ab.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "env": a.env, "variants": variants, "commits": commits, "train_args": train_args, "variant_args": own_args, "stop_steps": a.stop_steps,
        "fingerprint": fingerprint(), "windows": windows,
        "median_sps": {s: statistics.median(w["sps"] for w in ws) for s, ws in windows.items()},
        "ratios_b_over_a": ratios, "median_ratio": statistics.median(ratios),
        "busy": busy,
    }  # fmt: skip
    try:
        write_or_keep(a.out, (json.dumps(result, indent=1, default=str) + "\n").encode(), "--out")
    except ApplianceError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"B/A per round {', '.join(f'{x:.3f}' for x in ratios)}; median {result['median_ratio']:.3f}"
          f"{f' ({why_busy}: not an idle figure)' if busy else ''}; wrote {a.out}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

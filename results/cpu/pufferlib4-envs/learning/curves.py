"""The learning table of README.md from the curves here: each side's score over common agent-step
intervals, and the agent-steps at which ours first reaches PufferLib 4.0's final score.

    python results/cpu/pufferlib4-envs/learning/curves.py ENV [ENV ...] [--metric perf] [--marks 4] [--seed 0]

The common window (the shorter run) is cut into --marks equal intervals. A side's score at a mark is the
mean over every episode that ended in the interval up to it: its records' values weighted by the
episodes each averages (env/n; a record has the env's stats only when an episode ended in that epoch).
PufferLib 4.0's final score is its score at the window's end. Ours reaches it at the first record where
its mean over the interval's width of agent-steps up to that record is at least that.
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


Point = tuple[int, float, float]  # agent-steps, score, episodes


def curve(path: Path, step_key: str, metric: str) -> list[Point]:
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "env/" + metric in row:
            rows.append((int(row[step_key]), float(row["env/" + metric]), float(row.get("env/n", 1.0))))
    return rows


def mean(points: list[Point], lo: float, hi: float) -> float | None:
    """The episode-weighted mean of the records in (lo, hi]."""
    inside = [(v, n) for step, v, n in points if lo < step <= hi]
    weight = sum(n for _, n in inside)
    return sum(v * n for v, n in inside) / weight if weight > 0 else None


def first_reach(points: list[Point], target: float | None, width: float) -> int | None:
    """The agent-steps of the first record whose mean over the width before it is at least target."""
    if target is None:
        return None
    for step, _, _ in points:
        value = mean(points, step - width, step)
        if value is not None and value >= target:
            return step
    return None


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--metric", default="perf")
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed: pufferlib4-ENV-sN, ours-ENV-sN")
    parser.add_argument("--marks", type=int, default=4, help="marks at equal fractions of the common window")
    parser.add_argument(
        "--at",
        default="",
        help="the marks instead, comma-separated agent-steps (e.g. an env whose episodes all end together: "
        "one mark per episode period, and ours reaches the final score at the first mark where it does)",
    )
    args = parser.parse_args()
    for env in args.envs:
        peer_file = HERE / f"pufferlib4-{env}-s{args.seed}.jsonl"
        ours_file = HERE / f"ours-{env}-s{args.seed}.metrics.jsonl"
        if args.seed and not peer_file.is_file():  # a seed only ours ran: against PufferLib 4.0's seed 0
            peer_file = HERE / f"pufferlib4-{env}-s0.jsonl"
        if not peer_file.is_file() or not ours_file.is_file():
            print(f"error: {env}: {peer_file.name} or {ours_file.name} is missing", file=sys.stderr)
            return 2
        peer = curve(peer_file, "agent_steps", args.metric)
        ours = curve(ours_file, "global_step", args.metric)
        peer_end = json.loads(peer_file.read_text().splitlines()[-1])["agent_steps"]
        ours_end = json.loads(ours_file.read_text().splitlines()[-1])["global_step"]
        window = min(peer_end, ours_end)
        if args.at:
            marks = [int(float(m)) for m in args.at.split(",")]
        else:
            marks = [round(window * (i + 1) / args.marks) for i in range(args.marks)]
        bounds = [0, *marks]
        print(
            f"{env} ({args.metric}; window {window:,} agent-steps; PufferLib 4.0 ran {peer_end:,}, ours {ours_end:,})"
        )
        print("| agent-steps | " + " | ".join(f"{m / 1e6:.2f} M" for m in marks) + " |")
        print("|---|" + "---|" * len(marks))
        width = window / args.marks
        peer_at = [mean(peer, lo, hi) for lo, hi in zip(bounds[:-1], marks, strict=True)]
        ours_at = [mean(ours, lo, hi) for lo, hi in zip(bounds[:-1], marks, strict=True)]
        print("| PufferLib 4.0 | " + " | ".join(fmt(v) for v in peer_at) + " |")
        print("| ours | " + " | ".join(fmt(v) for v in ours_at) + " |")
        target = peer_at[-1]
        if args.at:
            reached = [
                m
                for m, v in zip(marks, ours_at, strict=True)
                if v is not None and target is not None and v >= target
            ]
            own_reached = [
                m
                for m, v in zip(marks, peer_at, strict=True)
                if v is not None and target is not None and v >= target
            ]
            reach, own = (reached or [None])[0], (own_reached or [None])[0]
        else:
            reach, own = first_reach(ours, target, width), first_reach(peer, target, width)
        print(
            f"PufferLib 4.0's score at {marks[-1]:,}: {fmt(target)}; ours reaches it at "
            + (f"{reach:,} agent-steps" if reach is not None else "no record in its run")
            + (f" (PufferLib 4.0 first at {own:,})" if own is not None else "")
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

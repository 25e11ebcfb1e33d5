"""A learning test's case over many seeds and CPU instruction sets: how often it passes, and by how much.

A learning test that passes on one CPU and fails on another usually sits near a cliff: its run
diverges from float rounding after a few epochs, so another CPU's kernels give another run, as
another seed does. This runs the cases of ``tests/test_learning.py``'s ``CASES`` (its mlp/Adam cases
and the Ocean envs' default cases) exactly as the test does, with ``train.seed`` set, under torch's
kernels for each instruction set asked (``native`` as the CPU is; ``avx512`` and ``avx2`` cap ATen,
oneDNN and MKL there, the code paths of a CPU that has no more), one run per process, and writes one
JSON line per run (the epochs' env stats and losses) and a table: steps to the stop target, the mean
over the case's window of epochs against the test's bar, and the policy's entropy at the end::

    python tools/learning_seeds.py squared --seeds 0-7 --isa native,avx2 \\
        --out results/cpu/learning-tests/squared.jsonl
    python tools/learning_seeds.py table results/cpu/learning-tests/squared.jsonl  # the table again
    python tools/learning_seeds.py squared --set train.ent_coef=0.01 --seeds 0-7  # another value

An instruction set above what the CPU has cannot be emulated: torch then runs what the CPU has.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
from tool_cli import Parser, in_run_folder  # noqa: E402  (a sibling script, not a package)

ISA = {  # what caps torch's CPU kernels at an instruction set (read when torch loads)
    "native": {},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}  # fmt: skip
CAPPED = [name for env in ISA.values() for name in env]


def seeds(text: str) -> list[int]:
    """``0-7`` or ``0,3,5``: whole numbers >= 0."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are e.g. 0-7 or 0,3,5, got {text!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"seeds are whole numbers >= 0, got {text!r}")
    return out


def overrides(items: list[str]) -> list[str]:
    """``KEY=VALUE`` items (``train.ent_coef=0.01``) as the command-line overrides that follow the case's."""
    out: list[str] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key or not value:
            raise SystemExit(f"error: --set takes SECTION.KEY=VALUE, e.g. train.ent_coef=0.01; got {item!r}")
        out += [f"--{key.replace('_', '-')}", value]
    return out


def child(case_name: str, seed: int, extra: list[str]) -> None:
    """In the run's own process: the case as the test runs it, the epochs' stats as one JSON line."""
    sys.path.insert(0, str(REPO / "tests"))
    import test_learning
    import torch

    from appliance.train import loop

    case = test_learning.CASES[case_name]
    case = dataclasses.replace(case, overrides=(*case.overrides, *extra))
    losses: list[dict[str, float]] = []
    original = loop.run

    def run(trainer: Any, stop: Any, **kw: Any) -> Any:  # each epoch's losses beside its env stats
        def keep(t: Any) -> None:
            losses.append({"step": t.global_step, **{k: float(v) for k, v in t.losses.items()}})

        return original(trainer, stop, on_epoch=[*kw.pop("on_epoch", ()), keep], **kw)

    test_learning.loop.run = run
    start = time.perf_counter()
    history, baseline = case.run(seed)
    print(json.dumps({
        "case": case_name, "seed": seed, "set": extra, "random": baseline, "bar": case.bar(baseline),
        "target": case.target(baseline), "metric": case.metric, "passes": case.passes(history, baseline),
        "window": case.window, "window_mean": test_learning.recent(history, case.metric, case.window),
        "seconds": time.perf_counter() - start,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": cpu(),
        "epochs": [{**h, **loss} for h, loss in zip(history, losses, strict=True)],
    }))  # fmt: skip


def cpu() -> dict[str, Any]:
    """The machine, as the reports' fingerprint names it."""
    from appliance import sysinfo

    d = sysinfo.cpu_details()
    keys = ("vendor", "family", "model_number", "stepping", "codename", "brand", "isa")
    return {k: d.get(k) for k in keys} | {"cores": os.cpu_count()}


def one(case: str, seed: int, isa: str, extra: list[str]) -> dict[str, Any]:
    from appliance.lifeline import dies_with_parent

    env = {k: v for k, v in os.environ.items() if k not in CAPPED}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", case, str(seed), *extra],
        env={**env, **ISA[isa]}, cwd=REPO, capture_output=True, text=True, preexec_fn=dies_with_parent(),
    )  # fmt: skip
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SystemExit(f"error: {case} seed {seed} ({isa}) failed: {tail}")
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**record, "isa": isa}


HEADER = (
    "| case | set | instructions (torch) | seed | steps to target | window mean | bar | test | entropy at end | s |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def row(r: dict[str, Any]) -> str:
    epochs = r["epochs"]
    reached = epochs[-1]["step"] if r["window_mean"] >= r["target"] else None  # runs stop once there
    steps = f"{reached / 1e6:.2f} M" if reached else "not reached"
    return (
        f"| {r['case']} | {' '.join(r['set']) or '-'} | {r['isa']} ({r['torch_cpu_capability']}) | {r['seed']} | {steps} | "
        f"{r['window_mean']:.3f} | {r['bar']:.3f} | {'pass' if r['passes'] else 'FAIL'} | "
        f"{epochs[-1]['entropy']:.3f} | {r['seconds']:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]), argv[3:])
        return 0
    if argv[:1] == ["table"]:  # the table again, from the JSON lines of earlier runs
        from appliance.errors import ApplianceError
        from appliance.safe_files import read_json_lines, skipped_note

        print(HEADER)
        for path in argv[1:]:
            try:  # a line cut short by a kill or a full disk is skipped, and said
                records, skipped = read_json_lines(path, "JSON-lines file")
            except ApplianceError as e:
                raise SystemExit(f"error: {e}") from None
            for record in records:
                print(row(record))
            if skipped_note(path, skipped):
                print(f"warning: {skipped_note(path, skipped)}", file=sys.stderr)
        return 0
    sys.path.insert(0, str(REPO / "tests"))
    import test_learning

    parser = Parser(description=__doc__.split("\n\n")[0])  # one-line errors, as every tool
    parser.add_argument("case", choices=sorted(test_learning.CASES))
    parser.add_argument("--seeds", type=seeds, default=seeds("0-3"), help="e.g. 0-7 or 0,3,5 (default 0-3)")
    parser.add_argument(
        "--isa", default="native", help=f"comma-separated, of {', '.join(ISA)} (default native)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="an override after the case's own, e.g. train.ent_coef=0.01 (repeatable)",
    )
    parser.add_argument("--out", type=Path, help="append each run's JSON line here")
    args = parser.parse_args(argv)
    isas = [i for i in args.isa.split(",") if i]
    if not isas or (bad := [i for i in isas if i not in ISA]):
        parser.error(f"--isa: unknown {', '.join(bad) or 'empty list'}; choose from {', '.join(ISA)}")
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir() or args.out.is_symlink()):
        parser.error(f"--out {args.out}: not a file in an existing folder (and not a symlink)")
    if args.out is not None and args.out.exists() and in_run_folder(args.out):  # appends: never to a run
        parser.error(f"--out {args.out} is a run's own file: refusing to append to it; name another file")
    extra = overrides(args.set)
    print(
        "| case | instructions (torch) | seed | steps to target | window mean | bar | test | entropy at end | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for isa in isas:
        for seed in args.seeds:
            record = one(args.case, seed, isa, extra)
            if args.out is not None:  # never through a link; a cut-short last line is set aside first
                from appliance.safe_files import append_line

                note = append_line(args.out, json.dumps(record) + "\n", "--out")
                if note:
                    print(f"warning: {note}", file=sys.stderr)
            print(row(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

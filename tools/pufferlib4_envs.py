#!/usr/bin/env python3
"""Every env of the pinned PufferLib 4.0 snapshot through puffer-bench: does it build, step and train,
and how fast its env code steps on our runtime beside PufferLib 4.0's own OpenMP vector.

    python tools/pufferlib4_envs.py --tree PATH/TO/PufferLib [--envs a,b] [--seconds 1] [--train]
        --out results/cpu/pufferlib4-envs

PATH/TO/PufferLib is a checkout of eig1n/PufferLib-OrbitWars at the commit tools/pufferlib4_peer.py
pins (nothing of it is committed here). Per env folder of its ocean/ (template, minimal and benchmark
left out: they are not tasks):
  build  `puffer-bench envs build ocean/NAME` (our compatibility header, its binding.c unchanged; a
         PufferLib 3.0-format folder with --spaces tools/pufferlib3_spaces/NAME.ini where that exists);
  step   `puffer-bench envs sps pufferlib:NAME --threads 1 --seconds S` in a process of its own
         (a crash is a reason, not the end of the table), agents = its ini's [vec] total_agents
         capped at 4,096;
  theirs its binding.c compiled against its own src/vecenv.h, linked with tools/pufferlib4_vecenv_sps.c,
         OMP_NUM_THREADS=1, the same agents, kwargs and seconds, uniform random actions both sides;
  train  (--train, a second pass over the table written) `puffer-bench train pufferlib:NAME --stop-steps 1e6
         --autotune off`
         on the cpu profile with an MLP core of 64 (whether it trains without error, not how well), in
         a process of its own; --deadline S starts no env after S seconds. Envs the table has trained
         already are skipped, unless named in --envs (then trained again).
Writes table.json (every row, with the machine's fingerprint and the commands) and table.md after
every env.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXCLUDED = ("template", "minimal", "benchmark")
CLI = [sys.executable, "-m", "appliance.cli"]
MAX_AGENTS = 4096


def log(msg: str) -> None:
    print(f"[envs] {msg}", file=sys.stderr, flush=True)


def ini_env(tree: Path, name: str) -> tuple[dict[str, float], int]:
    """The env's numeric [env] kwargs and [vec] total_agents, as `envs build` reads them."""
    sys.path.insert(0, str(REPO))
    from appliance import pufferlib_envs

    path = pufferlib_envs.find_ini(tree / "ocean" / name, name)
    sections = pufferlib_envs.read_ini(path)
    params, _ = pufferlib_envs.env_params(sections)
    total = (sections.get("vec") or {}).get("total_agents", 1024)
    return {k: v for k, _, v in params}, int(total) if isinstance(total, int) else 1024


def one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:  # a compiler's first error names the cause; what follows it is context
        if ": error:" in line or ": fatal error:" in line:
            return line[:300]
    for line in reversed(lines):
        if line.startswith("error:") or "Error" in line:
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]


# The env's own code opens its data by paths relative to the checkout's root (resources/NAME/...), as
# PufferLib 4.0 runs it: every command that runs env code runs there, on both sides.
WORKDIR: Path | None = None


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=env, cwd=WORKDIR
        )
    except subprocess.TimeoutExpired:
        return -999, f"timed out after {timeout:.0f} s", time.monotonic() - start
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def ours(name: str, agents_per_env: int, agents: int, seconds: float, scratch: Path) -> dict:
    num_envs = max(1, agents // agents_per_env)
    out = scratch / f"{name}-sps.json"
    code, text, _ = run([*CLI, "envs", "sps", f"pufferlib:{name}", "--threads", "1", "--seconds", str(seconds),
                         "--num-envs", str(num_envs), "--json", str(out)], timeout=300)  # fmt: skip
    if code != 0:
        why = f"crashed (signal {-code})" if code < 0 and code != -999 else one_line(text)
        return {"ok": False, "why": why}
    rows = json.loads(out.read_text())["rows"]
    return {"ok": True, "sps": rows[0]["sps"], "agents": num_envs * agents_per_env, "num_envs": num_envs}


def theirs(
    tree: Path, name: str, agents: int, kwargs: dict[str, float], seconds: float, scratch: Path
) -> dict:
    sys.path.insert(0, str(REPO))
    from appliance import pufferlib_envs

    ray = pufferlib_envs.find_raylib()
    exe = scratch / f"{name}-theirs"
    src = tree / "ocean" / name
    vendor = tree / "vendor"
    cmd = ["gcc", "-O2", "-DNDEBUG", "-DPLATFORM_DESKTOP", "-fopenmp", "-w", f"-I{tree / 'src'}", f"-I{src}",
           f"-I{vendor}", *([f"-I{ray / 'include'}"] if ray else []), str(src / "binding.c"),
           str(REPO / "tools" / "pufferlib4_vecenv_sps.c"), "-o", str(exe),
           *([str(ray / "lib" / "libraylib.a")] if ray else []), "-lm", "-lpthread", "-ldl"]  # fmt: skip
    code, text, _ = run(cmd, timeout=600)
    if code != 0:
        return {"ok": False, "why": "build: " + one_line(text)}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [str(exe), str(agents), str(seconds), *[f"{k}={v}" for k, v in kwargs.items()]]
    code, text, _ = run(args, timeout=120, env=env)
    found = re.search(r"sps=([\d.]+)", text)
    if code != 0 or not found:
        return {"ok": False, "why": f"crashed (signal {-code})" if code < 0 else one_line(text)}
    return {"ok": True, "sps": float(found.group(1))}


def train(name: str, scratch: Path) -> dict:
    cmd = [*CLI, "train", f"pufferlib:{name}", "--gpu", "cpu", "--no-dashboard", "--autotune", "off", "--stop-steps", "1e6",
           "--policy.core", "mlp", "--policy.hidden-size", "64", "--train.data-dir", str(scratch / "runs"),
           "--run-id", name]  # fmt: skip
    code, text, seconds = run(cmd, timeout=1800)
    if code != 0:
        return {"ok": False, "why": one_line(text), "seconds": round(seconds, 1)}
    return {"ok": True, "seconds": round(seconds, 1)}


def machine() -> dict:
    code, text, _ = run([*CLI, "info", "--json"], timeout=120)
    fp = json.loads(text[text.index("{") :]) if code == 0 else {}
    cpu = fp.get("cpu") or {}
    name = f"{cpu.get('model') or platform.processor()} family {cpu.get('family')} model {cpu.get('model_number')}"
    git = fp.get("git") or {}
    return {"cpu": f"{name} ({cpu.get('codename')})", "host": fp.get("host_hash"), "cores": cpu.get("physical_cores"),
            "commit": git.get("commit") if isinstance(git, dict) else git}  # fmt: skip


def render(data: dict) -> str:
    rows = data["rows"]
    n = len(rows)
    built = sum(r["build"]["ok"] for r in rows)
    stepped = sum(r.get("step", {}).get("ok", False) for r in rows)
    theirs_built = [r for r in rows if not r.get("theirs", {}).get("why", "").startswith("build:")]
    ours_of_theirs = sum(r.get("step", {}).get("ok", False) for r in theirs_built)
    format3 = sum(r.get("step", {}).get("ok", False) and r["build"].get("format") == "3.0" for r in rows)
    trained = [r for r in rows if "train" in r]
    trains = sum(r["train"]["ok"] for r in trained)
    lines = [
        "# PufferLib 4.0's envs on puffer-bench",
        "",
        f"Written by `{data['command']}` on {data['machine']['cpu']} ({data['machine']['cores']} cores, host "
        f"{data['machine'].get('host')}, commit {data['machine'].get('commit')}), from eig1n/PufferLib-OrbitWars "
        f"at {data['snapshot']}. Machine shared with other jobs while it ran: the speeds are a side-by-side "
        "ratio per env (ours, then PufferLib 4.0's, back to back), not absolute figures.",
        "",
        f"- {n} task envs (template, minimal and benchmark left out); {built} build through `puffer-bench envs "
        f"build` and {stepped} build and step.",
        f"- {len(theirs_built)} of the {n} build with PufferLib 4.0's own vecenv.h on the CPU (the rest are "
        f"PufferLib 3.0-format folders without their env_binding.h, or lack OBS_TENSOR_T, which its build.sh "
        f"requires too); of those {len(theirs_built)}, {ours_of_theirs} build and step on ours.",
        f"- {format3} PufferLib 3.0-format folders build and step on ours (format 3.0 in the table), their "
        "spaces from tools/pufferlib3_spaces/NAME.ini: what each env's NAME.py declares in PufferLib 3.x's "
        "history (the file names its source), which the snapshot does not ship.",
    ]
    if trained:
        lines.append(f"- {trains} of the {len(trained)} tried train 1 M agent-steps without error.")
    lines += [
        "",
        "Agent-steps/s: env only, uniform random actions, one thread, the same agents and kwargs both sides "
        f"({data['seconds']} s each); ours through `envs sps`, PufferLib 4.0's through its own vecenv.h "
        "(OpenMP, OMP_NUM_THREADS=1) and tools/pufferlib4_vecenv_sps.c.",
        "",
        "| env | format | 4.0 builds | ours builds | steps | agents | ours (M/s) | 4.0 (M/s) | ours / 4.0 | trains 1 M | why not |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        step, their = r.get("step", {}), r.get("theirs", {})
        ratio = (
            f"{step['sps'] / their['sps']:.2f}" if step.get("ok") and their.get("ok") and their["sps"] else ""
        )
        tr = r.get("train")
        why = r["build"].get("why") or step.get("why") or (tr or {}).get("why") or ""
        ours_m = f"{step['sps'] / 1e6:.3f}" if step.get("ok") else ""
        theirs_m = f"{their['sps'] / 1e6:.3f}" if their.get("ok") else ""
        their_build = "no" if their.get("why", "").startswith("build:") else "yes"
        trains_cell = "" if tr is None else ("yes" if tr["ok"] else "no")
        cells = [r["env"], r["build"].get("format") or ("4.0" if r["build"]["ok"] else ""), their_build, "yes" if r["build"]["ok"] else "no", "yes" if step.get("ok") else "no",
                 str(step.get("agents", "")), ours_m, theirs_m, ratio, trains_cell, why.replace("|", "/")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(args: argparse.Namespace, tree: Path, rows: list[dict], commands: list[str]) -> None:
    """table.json and table.md as they stand (after every env, so a long pass loses nothing)."""
    snapshot = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    if not snapshot.strip():  # an exported tree: the commit the peer harness pins
        pinned = re.search(r'^COMMIT = "(\w+)"', (REPO / "tools" / "pufferlib4_peer.py").read_text(), re.M)
        snapshot = f"{pinned.group(1)} (the pinned commit; the tree is an export)" if pinned else ""
    data = {"command": " ; ".join(commands), "snapshot": snapshot.strip() or "(not a git checkout)",
            "seconds": args.seconds, "machine": args.machine, "rows": rows}  # fmt: skip
    tmp = args.out / "table.json.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(args.out / "table.json")
    (args.out / "table.md").write_text(render(data))


def measure(args: argparse.Namespace, tree: Path, names: list[str], scratch: Path, base: list[dict]) -> None:
    """Build, step and time every env (no training), writing the table after each: ``base`` (the
    table already written, for a pass over some envs) with these envs' rows in place of theirs."""
    from appliance import pufferlib_envs

    rows: list[dict] = []
    for name in names:
        row: dict = {"env": name}
        rows.append(row)
        # built in a process of its own: the build runs the env's my_init, which may abort
        spaces = args.spaces_dir / f"{name}.ini"  # a PufferLib 3.0-format folder's spaces (its NAME.py's)
        extra = ["--spaces", str(spaces)] if spaces.is_file() else []
        code, text, _ = run([*CLI, "envs", "build", str(tree / "ocean" / name), *extra], timeout=900)
        built = pufferlib_envs.current(name) if code == 0 else None
        kwargs, total = ini_env(tree, name)
        if built is None:
            why = one_line(text).removeprefix("error: ").split(" (full log")[0]
            row["build"] = {"ok": False, "why": why}
            log(f"{name}: build: {why}")
            # does PufferLib 4.0's own vector build it? (one agent per env assumed: we have no layout)
            row["theirs"] = theirs(tree, name, min(total, MAX_AGENTS), kwargs, args.seconds, scratch)
        else:
            apr = int(built.meta["agents_per_env"])
            row["build"] = {"ok": True, "agents_per_env": apr, "format": built.meta.get("format", "4.0")}
            kwargs = {k: v for k, v in kwargs.items() if k in built.meta["params"]}
            agents = max(apr, min(total, MAX_AGENTS) // apr * apr)
            row["step"] = ours(name, apr, agents, args.seconds, scratch)
            row["theirs"] = theirs(tree, name, agents, kwargs, args.seconds, scratch)
            log(f"{name}: ours {row['step']} theirs {row['theirs']}")
        again = {r["env"]: r for r in rows}
        merged = [again.pop(r["env"], r) for r in base] + list(again.values())
        write(args, tree, merged, args.commands)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tree", required=True, type=Path, help="a PufferLib 4.0 checkout (its ocean/, config/, src/)"
    )
    ap.add_argument("--envs", help="comma-separated env folders (default: all)")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument(
        "--train", action="store_true",
        help="train each stepping env of the table already written 1 M agent-steps (a second pass)",
    )  # fmt: skip
    ap.add_argument(
        "--deadline", type=float, default=float("inf"), help="--train: start no env after this many s"
    )
    ap.add_argument(
        "--spaces-dir", type=Path, default=REPO / "tools" / "pufferlib3_spaces",
        help="spaces files (NAME.ini) of PufferLib 3.0-format folders, whose NAME.py the snapshot lacks",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    tree = args.tree.resolve()
    global WORKDIR
    WORKDIR = tree
    if not (tree / "ocean").is_dir() or not (tree / "src" / "vecenv.h").is_file():
        sys.exit(f"{tree} is not a PufferLib 4.0 checkout (no ocean/ or src/vecenv.h)")
    names = sorted(p.name for p in (tree / "ocean").iterdir() if p.is_dir() and p.name not in EXCLUDED)
    if args.envs:
        names = [n for n in args.envs.split(",") if n in names]
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    shown = " ".join(a for a in sys.argv[1:] if not a.startswith("--tree") and a != str(args.tree))
    command = f"python tools/pufferlib4_envs.py --tree PATH/TO/PufferLib {shown}"
    scratch = Path(tempfile.mkdtemp(prefix="p4envs-"))
    try:
        if not args.train:
            args.machine, args.commands, base = machine(), [command], []
            if args.envs and (args.out / "table.json").is_file():  # some envs again, into the table
                data = json.loads((args.out / "table.json").read_text())
                args.machine, args.commands, base = data["machine"], [data["command"], command], data["rows"]
            measure(args, tree, names, scratch, base)
        else:
            data = json.loads((args.out / "table.json").read_text())
            args.machine, args.commands = data["machine"], [data["command"], command]
            rows, start = data["rows"], time.monotonic()
            for row in rows:
                if (
                    row["env"] not in names
                    or not row.get("step", {}).get("ok")
                    or ("train" in row and not args.envs)
                ):
                    continue
                if time.monotonic() - start > args.deadline:
                    log(f"deadline: {row['env']} and the rest not trained")
                    break
                row["train"] = train(row["env"], scratch)
                log(f"{row['env']}: train {row['train']}")
                write(args, tree, rows, args.commands)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"wrote {args.out / 'table.md'}")


if __name__ == "__main__":
    main()

"""The neighbours of issue 45's cases, tried as a hostile input would (results/cpu/faults/round4-hunt.md).

    python tools/results/cpu/faults/round4_hunt.py      # from the checkout; prints one line a case

Runs ``puffer-bench ARGS`` for each case in a scratch folder holding ``link`` (a symbolic link to a
file outside), ``dangling``, ``linkdir`` (a link to a folder outside), ``dir`` and ``ro`` (mode
555), with two committed reports as ``a.json`` and ``b.json``; then says whether the file outside
is intact. A case that runs past 45 s was accepted (its work started).
"""

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
H = Path(tempfile.mkdtemp(prefix="round4-hunt-"))
for name in ("ro", "outside", "dir"):
    (H / name).mkdir()
(H / "outside" / "precious.txt").write_text("precious\n")
(H / "ro").chmod(0o555)
(H / "link").symlink_to("outside/precious.txt")
(H / "dangling").symlink_to("nowhere/x")
(H / "linkdir").symlink_to("outside")
shutil.copy(REPO / "results/cpu/2026-11-23-5afad08017fd.json", H / "a.json")
shutil.copy(REPO / "results/cpu/2026-11-25-7a14253ab53b.json", H / "b.json")
PY = [sys.executable, "-m", "appliance.cli"]
cases = [
    # output options: symlink to a precious file, dangling symlink, directory, read-only folder
    "compare a.json b.json --out link",
    "compare a.json b.json --out dir",
    "compare a.json b.json --out ro/x.md",
    "compare a.json b.json --out dangling",
    "report a.json --markdown link",
    "report a.json --markdown ro/x.md",
    "report a.json --markdown dir",
    "vector-bench --seconds 0.05 --json link",
    "vector-bench --seconds 0.05 --json ro/x.json",
    "autotune squared --seconds 0.05 --save link",
    "autotune squared --save ro/x.yaml",
    "autotune squared --save dir",
    "probe --out link",
    "probe --out ro/p.json",
    "gpu-check --out ro",
    "gpu-check --out link",
    "eval squared --episodes 1 --gif link",
    "eval squared --gif ro/x.gif",
    "train squared --stop-steps 100 --no-dashboard --train.data-dir ro",
    "train squared --stop-steps 100 --no-dashboard --report link",
    "train squared --stop-steps 100 --no-dashboard --train.data-dir linkdir --run-id r1",
    "sweep squared --trials 1 --out link",
    "sweep squared --trials 1 --out ro/s",
    "run --out ro --suite quick",
    "ab --out link",
    # numbers
    "compare a.json b.json --threshold nan",
    "compare a.json b.json --threshold -1",
    "compare a.json b.json --threshold 1e300",
    "eval squared --episodes 0",
    "eval squared --episodes -1",
    "eval squared --episodes 1e12",
    "autotune squared --seconds nan",
    "autotune squared --seconds -1",
    "autotune squared --seconds 0",
    "autotune squared --cores 0",
    "autotune squared --cores -1",
    "autotune squared --forward-ms nan",
    "autotune squared --forward-ms -1",
    "autotune squared --max-ram-gb nan",
    "autotune squared --max-ram-gb -1",
    "autotune squared --batch-size 0",
    "vector-bench --seconds nan",
    "vector-bench --seconds 0",
    "vector-bench --step-us -1",
    "vector-bench --step-us nan",
    "vector-bench --cores 0",
    "vector-bench --cores 100000",
    "gpu-check --runs 0",
    "gpu-check --runs -1",
    "train squared --stop-steps -1 --no-dashboard",
    "train squared --stop-seconds nan --no-dashboard",
    "train squared --train.learning-rate nan --no-dashboard",
    "train squared --train.learning-rate -1 --no-dashboard",
    "train squared --vec.recv-timeout 0 --no-dashboard",
    "train squared --vec.recv-timeout nan --no-dashboard",
    "train squared --train.gamma 2 --no-dashboard",
    "train squared --train.seed -1 --no-dashboard --stop-steps 10",
    "sweep squared --trials 0",
    "sweep squared --trials 1e12",
    "sweep squared --trials nan",
    "envs sps squared --threads 0",
    "envs sps squared --seconds nan",
    "envs sps squared --seconds -1",
    "info --json extra",
]
for c in cases:
    try:
        p = subprocess.run(
            PY + shlex.split(c), cwd=H, capture_output=True, text=True, timeout=45,
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        tb = any("Traceback" in line for line in err)
        last = err[-1][:200] if err else ""
        print(f"{c!r:70} rc={p.returncode} lines={len(err)} {'TRACEBACK ' if tb else ''}| {last}", flush=True)
    except subprocess.TimeoutExpired:
        print(f"{c!r:70} TIMEOUT (ran >45 s: accepted)", flush=True)
print("precious:", (H / "outside" / "precious.txt").read_text().strip(), sorted(os.listdir(H / "outside")))
(H / "ro").chmod(0o755)
shutil.rmtree(H, ignore_errors=True)

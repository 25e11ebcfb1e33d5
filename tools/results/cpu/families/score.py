"""The score of a training run at an agent-step bar, from its metrics.jsonl (issue 63's families).

    python tools/results/cpu/families/score.py RUN_DIR_OR_METRICS [BAR] [TARGET]

Prints one JSON line: ``last5`` the mean episode return of the last 5 records that ended episodes
at or before BAR (each record's own episodes, as the learn suite's rule reads epochs), ``pooled``
the mean over the episodes those 5 records ended (weighted by ``env/n``), ``episodes`` their
count, ``at`` the agent-step of the last of them, and with TARGET ``first`` the agent-step at
which the 5-record mean first reached it (null if never, up to BAR).
"""

import json
import sys
from pathlib import Path

path = Path(sys.argv[1])
if path.is_dir():
    path = path / "metrics.jsonl"
bar = float(sys.argv[2]) if len(sys.argv) > 2 else float("inf")
target = float(sys.argv[3]) if len(sys.argv) > 3 else None
rows = []
for line in path.read_text().splitlines():
    r = json.loads(line)
    if r.get("env/n", 0) > 0 and "env/episode_return" in r and r["global_step"] <= bar:
        rows.append((r["global_step"], r["env/n"], r["env/episode_return"]))
first = None
for i in range(5, len(rows) + 1):
    if target is not None and sum(x[2] for x in rows[i - 5 : i]) / 5 >= target:
        first = rows[i - 1][0]
        break
last = rows[-5:]
out = {
    "run": str(path.parent.name),
    "bar": bar,
    "at": last[-1][0] if last else None,
    "last5": round(sum(x[2] for x in last) / len(last), 1) if last else None,
    "pooled": round(sum(x[1] * x[2] for x in last) / sum(x[1] for x in last), 1) if last else None,
    "episodes": int(sum(x[1] for x in last)),
    "first": first,
}
print(json.dumps(out))

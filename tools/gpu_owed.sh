#!/usr/bin/env bash
# The GPU checks the CPU cannot make, in one call on a lent GPU machine (docs/lab/notes.md, "A lent GPU").
# Run from the repository root on that machine, with the wheels of the packages its image lacks in .whl/
# (gymnasium, farama-notifications, pettingzoo, optuna and its needs, heavyball), for PufferLib 4.0's
# CUDA trainer its sources, raylib and wheels in .peer4/ (`tools/pufferlib4_peer.py pack`) and, for
# PufferLib 3.0 beside ours, its sources and packages in .whl/peer (`tools/pufferlib_peer.py wheels`); the
# device call carries .whl and .peer4. Steps run in order of importance, each under its own time limit
# (cut to the seconds left), and a step is skipped when fewer seconds are left than it needs; reports are
# collected flat in $OUT after every step (the tool brings back at most 8 files), the rest in a tarball.
#   OUT=/tmp/out BUDGET_S=540 bash tools/gpu_owed.sh
set -u
OUT=${OUT:-/tmp/gpu-owed}
BUDGET_S=${BUDGET_S:-540}
WORK=/tmp/gpu-owed-work
# the hardware profile the suites run on: the lent machine is an H200 (its profile: appliance/config/hardware.py)
GPU=${GPU:-h200}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
START=$(date +%s)
LOG="$OUT/log.txt"
exec > >(tee -a "$LOG") 2>&1

left() { echo $((BUDGET_S - ($(date +%s) - START))); }
# the reports' JSON so far, flat in $OUT (`puffer-bench report --render` makes their Markdown again): after
# every step, so that a call cut short still brings back what finished
collect() {
    local f rel
    # at most 8 files come back (log.txt and rest.tgz among them): the threads and quick reports only
    # in the tarball
    for f in "$WORK"/peer4/*.json "$WORK"/kernels/*/*.json "$WORK"/h200/*/*.json "$WORK"/update/*/*.json \
        "$WORK"/engine/*/*.json "$WORK"/peer/*.json; do
        [ -f "$f" ] || continue
        rel=${f#"$WORK"/}
        cp "$f" "$OUT/${rel%%/*}-$(basename "$f")"
    done
}
# step NAME NEEDS_S LIMIT_S COMMAND...: run COMMAND under LIMIT_S seconds (at most the seconds left) if
# NEEDS_S are left.
step() {
    local name=$1 needs=$2 limit=$3
    shift 3
    if [ "$(left)" -lt "$needs" ]; then
        echo "== skipped $name: $(left) s left, needs $needs"
        return 0
    fi
    [ "$(left)" -lt "$limit" ] && limit=$(left)
    echo "== $(date -u +%T) $name (limit ${limit} s, $(left) s left)"
    local t0
    t0=$(date +%s)
    timeout --signal=INT --kill-after=15 "$limit" "$@"
    echo "== $name: exit $?, $(($(date +%s) - t0)) s"
    collect
}

echo "== $(date -u +%FT%TZ) git $(git rev-parse HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nproc
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$WORK/install.log" 2>&1 \
    || { tail -40 "$WORK/install.log"; exit 1; }
echo "== installed in $(($(date +%s) - t0)) s"
PB="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/puffer-bench"
[ -x "$PB" ] || PB=puffer-bench

# 0. what the appliance makes of the machine with no flags: the profile it picks and why, breakout's
#    resolved config; whether a Docker daemon can run here (the CUDA image's test needs one)
"$PB" info 2>&1 | head -40
"$PB" config breakout 2>&1 | head -30
{ command -v docker dockerd containerd; ls -l /var/run/docker.sock; } 2>&1 | head -5
# 1. PufferLib 4.0's native CUDA trainer (build.sh breakout's default build: nvcc on src/bindings.cu, 1-3
#    minutes; sm_90, what -arch=native gives on an H100 or H200) on breakout with its own
#    config/breakout.ini, to the ini's 94 M steps or 100 s, whichever comes first: its time to perf 0.9
#    beside ours, from the sources `python tools/pufferlib4_peer.py pack` put in .peer4. The build runs
#    on the CPU beside gpu-check and the GPU tests (correctness only, nothing timed), then trains alone.
if [ -f .peer4/sources.tar.gz ]; then
    mkdir -p "$WORK/peer4"
    echo "== $(date -u +%T) peer4-build in the background (limit 200 s)"
    (t0=$(date +%s); timeout --signal=INT --kill-after=15 200 python3 tools/pufferlib4_peer.py --cache .peer4 \
        build --cuda --envs breakout --arch sm_90 >"$WORK/peer4/build.log" 2>&1
     echo "== peer4-build: exit $?, $(($(date +%s) - t0)) s") &
    BUILD=$!
fi
# 2. every fused kernel against its reference, the graphed update against the called one
step gpu-check 60 120 "$PB" gpu-check --out "$WORK/kernels"
# 3. the GPU tests (the fused optimizer against torch's, an action-masked env under graphs, ...)
step tests-gpu 60 150 python3 -m pytest -q -p no:cacheprovider tests/gpu
if [ -n "${BUILD:-}" ]; then
    wait "$BUILD"
    tail -15 "$WORK/peer4/build.log"
    # its ini's seed (42), then seed 1: two runs a side, as ours' two seeds (22 s each on the H200)
    step peer4-train 100 160 python3 tools/pufferlib4_peer.py --cache .peer4 train breakout --device cuda \
        --stop-seconds 100 --metric perf --target 0.9 --at 30e6,65e6 --out "$WORK/peer4/pufferlib4-cuda-breakout.json"
    step peer4-train-s1 100 160 python3 tools/pufferlib4_peer.py --cache .peer4 train breakout --device cuda \
        --seed 1 --stop-seconds 100 --metric perf --target 0.9 --at 30e6,65e6 --out "$WORK/peer4/pufferlib4-cuda-breakout-s1.json"
fi
# 4. the h200 profile measured: breakout's agent-steps/s on its defaults beside the plain loop, two
#    buffers and the fused optimizer, and its time to perf 0.9 (tools/h200_suite.yaml)
step h200 150 220 "$PB" run --suite tools/h200_suite.yaml --gpu "$GPU" --repeats 2 --out "$WORK/h200" --no-plots
# 4b. where the update's time could go next: horizon, minibatch, LSTM size, the mingru core (speeds), then
#     the time to perf 0.9 with a horizon of 32, two seeds (its learning checked on a CPU first:
#     results/cpu/gpu-update-learning/); each run to 0.9 trained 6.9-7.2 s on the H200 in its last call
step update 150 220 "$PB" run --suite tools/gpu_update_suite.yaml --gpu "$GPU" --repeats 2 --out "$WORK/update" --no-plots
# 4c. where the update's time goes on the GPU: three epochs of breakout on the profile's defaults under
#     torch.profiler, its ops and kernels by their own device time (the .ops.txt, in the tarball; the
#     trace itself stays on the machine: tens of MB). The update eager (graphs off): the same kernels,
#     each one attributed, where a captured graph would show them under its replay
mkdir -p "$WORK/profile" /tmp/gpu-owed-trace
step profile 60 120 "$PB" train breakout --gpu "$GPU" --no-dashboard --autotune off --train.graphs false \
    --train.data-dir /tmp/gpu-owed-trace --profile-trace /tmp/gpu-owed-trace/breakout.json
cp /tmp/gpu-owed-trace/breakout.json.ops.txt "$WORK/profile/" 2>/dev/null
# 5. (tools/fused_optimizer_suite.yaml, the fused optimizer's time to 0.9, ran on 2026-11-30: results/h200/;
#    the h200 suite above times the switch on every call)
# 6. breakout as a new user runs it: no flags, so the appliance tunes itself to this machine first
step train-defaults 120 150 "$PB" train breakout --no-dashboard --stop-steps 60e6 --run-id defaults \
    --train.data-dir "$WORK/defaults"
# 6b. the engine suite: buffers 1-8 with and without graphs
step engine 150 200 "$PB" run --suite engine --gpu "$GPU" --repeats 1 --out "$WORK/engine" --no-plots
# 7. PufferLib 3.0's trainer on breakout on the same machine, in the same window (the peer harness's
#    CUDA build from .whl/peer, filled here by `python tools/pufferlib_peer.py wheels --out .whl/peer`)
if [ -d .whl/peer ]; then
    step peer-build 300 300 python3 tools/pufferlib_peer.py --cache /tmp/peer build --envs breakout \
        --cuda --system-torch --wheels .whl/peer
    step peer-train 150 240 python3 tools/pufferlib_peer.py --cache /tmp/peer train breakout --device cuda \
        --stop-steps 90e6 --metric perf --target 0.9 --at 30e6,65e6 --out "$WORK/peer/pufferlib-breakout.json"
fi
# 8. the native pool's scaling, 1 to 16 threads: pong and snake (breakout and squared: results/h100/threads/)
step threads 60 150 "$PB" run --suite threads --gpu "$GPU" --envs pong,snake --out "$WORK/threads" --no-plots
# 9. two quick-suite reports (what `compare` says of two runs on one machine), in the tarball
step quick-1 150 140 "$PB" run --suite quick --gpu "$GPU" --out "$WORK/quick-1" --no-plots
step quick-2 150 140 "$PB" run --suite quick --gpu "$GPU" --out "$WORK/quick-2" --no-plots

collect  # all else (curves, logs, 4.0's build commands) in the tarball
n=$(find "$OUT" -maxdepth 1 -name '*.json' | wc -l)
cp .peer4/build-cuda/breakout/build.json "$WORK/peer4/pufferlib4-cuda-build.json" 2>/dev/null
tar czf "$OUT/rest.tgz" -C "$WORK" .
echo "== $n reports in $OUT, $(($(date +%s) - START)) s in all"
ls -la "$OUT"

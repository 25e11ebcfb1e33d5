#!/usr/bin/env bash
# make docker-test: build the CPU image and run the test suite and the quick bench in it, for real.
#
# Uses the Docker daemon that DOCKER_HOST (or the default socket) points at. When none is reachable
# and this runs as root, it installs docker.io and debootstrap with apt-get if they are missing
# (services not started) and starts its own daemon: own socket and data folder under /var/tmp, no
# bridge network, no iptables; stopped and removed on exit, also on failure or Ctrl-C. Where Docker
# cannot be had at all (no daemon, and not root or no apt-get), it says why in one line and exits 0
# (DOCKER_TEST=require makes that an error).
#
# Steps: base image (python:X.Y-slim if it can be pulled, else Debian bootstrapped locally), the
# wheelhouse and the image (./docker.sh build --cpu: host network for the build only), the test
# suite in the image (./docker.sh test --cpu: --network none, as the image's non-root user), the
# quick suite with a results folder mounted (./docker.sh bench --cpu) and the report checked on
# the host against the report schema, then the tests marked docker against the daemon
# (puffer-bench run --container, docker.sh shell/errors, docker stop).
#
# Environment: PYTHON (host Python with the project installed; default .venv/bin/python), BASE,
# TORCH, TORCH_INDEX (see images/wheelhouse.sh), PYTEST_ARGS (for the in-image test run; default the
# whole suite), DOCKER_TEST=require.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
LOCAL_BASE=puffer-bench-base:bookworm
IMAGE=puffer-bench:cpu
OWN=""      # folder of the daemon this script started
DOCKERD=""  # its pid
RESULTS=""  # the bench's results folder on the host
STEP=""     # pid of the step running now

say() { echo "docker-test: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
skip() {
    [ "${DOCKER_TEST:-}" != require ] || die "$* (DOCKER_TEST=require)"
    say "skipped: $*"
    exit 0
}

stop_daemon() {
    say "stopping the daemon it started and removing $OWN"
    local ids
    ids=$(docker ps -aq 2>/dev/null) || true
    [ -z "$ids" ] || echo "$ids" | xargs docker rm -f >/dev/null 2>&1 || true
    if kill -0 "$DOCKERD" 2>/dev/null; then
        kill -TERM "$DOCKERD"
        for _ in $(seq 60); do
            kill -0 "$DOCKERD" 2>/dev/null || break
            sleep 0.5
        done
        kill -0 "$DOCKERD" 2>/dev/null && kill -KILL "$DOCKERD"
    fi
    wait "$DOCKERD" 2>/dev/null || true
    # whatever the daemon left mounted under its folder (layers, shm), deepest first
    findmnt -rn -o TARGET | grep -F "$OWN/" | sort -r | xargs -r -n 1 umount -l 2>/dev/null || true
    rm -rf "$OWN"
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    [ -z "$STEP" ] || kill -TERM "$STEP" 2>/dev/null || true
    [ -z "$RESULTS" ] || rm -rf "$RESULTS"
    [ -z "$OWN" ] || stop_daemon
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

apt_install() {
    # install packages without letting their scripts start services (a default dockerd would
    # create a bridge network and iptables rules)
    local made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local log rc=0
    log=$(mktemp)
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >"$log" 2>&1 || rc=$?
    [ "$made_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
    [ "$rc" = 0 ] || say "apt-get install $*: $(tail -n 1 "$log")"
    rm -f "$log"
    return "$rc"
}

start_daemon() {
    OWN=$(mktemp -d /var/tmp/pbdock.XXXXXX)
    # in a session of its own: a Ctrl-C or a CI timeout signals this script, which stops the daemon
    # in order (cleanup), rather than the daemon directly
    setsid dockerd --host "unix://$OWN/docker.sock" --data-root "$OWN/root" --exec-root "$OWN/exec" \
        --pidfile "$OWN/dockerd.pid" --bridge=none --iptables=false --ip-masq=false >"$OWN/dockerd.log" 2>&1 &
    DOCKERD=$!
    export DOCKER_HOST="unix://$OWN/docker.sock"
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$DOCKERD" 2>/dev/null || break
        sleep 0.5
    done
    local why
    why=$(grep -i -m 1 -E 'level=(fatal|error)' "$OWN/dockerd.log" || tail -n 1 "$OWN/dockerd.log")
    skip "dockerd did not start here: ${why:-no message}"
}

minutes() {
    local s=$1
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}

timed() {
    # timed LABEL CMD...: run CMD, then say how long it took. CMD runs in the background so that a
    # SIGTERM to this script is handled at once (bash runs traps only between foreground commands).
    local label=$1 start=$SECONDS
    shift
    "$@" &
    STEP=$!
    wait "$STEP"
    STEP=""
    say "$label took $(minutes $((SECONDS - start)))"
}

# ---------------------------------------------------------------------- a daemon
command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && say "using the reachable Docker daemon (${DOCKER_HOST:-default socket})"
if ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
    [ "$(id -u)" = 0 ] || skip "no Docker daemon is reachable and, not being root, it cannot start one"
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
        command -v apt-get >/dev/null 2>&1 || skip "no Docker daemon is reachable and there is neither dockerd nor apt-get to install it"
        say "installing docker.io and debootstrap with apt-get"
        apt_install docker.io debootstrap || skip "Docker could not be installed with apt-get"
    fi
    start_daemon
    say "started its own daemon ($DOCKER_HOST; no bridge network, no iptables)"
fi
[ -x "$PYTHON" ] || die "no host Python at $PYTHON (run make install, or set PYTHON)"
"$PYTHON" -c 'import appliance, docker' 2>/dev/null ||
    die "$PYTHON lacks the project or the Docker SDK: pip install -e '.[dev,docker]' (make install does)"

# ---------------------------------------------------------------------- the base image
PYV=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
BASE=${BASE:-python:$PYV-slim}
if docker image inspect "$BASE" >/dev/null 2>&1; then
    say "base image $BASE is present"
elif why=$(timeout 300 docker pull "$BASE" 2>&1 >/dev/null); then
    say "pulled the base image $BASE"
else
    say "cannot pull $BASE (${why##*: }): building the Debian base $LOCAL_BASE locally instead (images/debian-base.sh)"
    if ! docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        if ! command -v debootstrap >/dev/null 2>&1; then
            command -v apt-get >/dev/null 2>&1 || die "no base image: $BASE cannot be pulled and debootstrap is missing"
            apt_install debootstrap || die "no base image: debootstrap could not be installed"
        fi
        timed "the Debian base" images/debian-base.sh "$LOCAL_BASE"
    fi
    BASE=$LOCAL_BASE
    export PYTHON_VERSION=3.11 # bookworm's
fi

# ---------------------------------------------------------------------- build, test, bench
export PYTHON TORCH TORCH_INDEX
timed "./docker.sh build --cpu" ./docker.sh build --cpu --base "$BASE"
say "image $IMAGE: $(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.2f GB", $1 / 1e9 }')"
# PYTEST_ARGS split as a shell would (quotes allowed): e.g. PYTEST_ARGS="-m 'not slow'"
pytest_args=()
[ -z "${PYTEST_ARGS:-}" ] || mapfile -t pytest_args < <("$PYTHON" -c 'import shlex, sys; print(*shlex.split(sys.argv[1]), sep="\n")' "${PYTEST_ARGS:-}")
timed "./docker.sh test --cpu ${PYTEST_ARGS:-}" ./docker.sh test --cpu -- "${pytest_args[@]}"

RESULTS=$(mktemp -d)
export RESULTS
timed "./docker.sh bench --cpu" ./docker.sh bench --cpu -- --suite quick --repeats 1
mapfile -t reports < <(find "$RESULTS" -name '*.json' -type f)
[ "${#reports[@]}" = 1 ] || die "expected one report in the mounted results folder, found ${#reports[@]}: ${reports[*]:-none}"
"$PYTHON" -c 'import sys; from appliance.bench.report import load; r = load(sys.argv[1]); print("docker-test: report", sys.argv[1], "is valid:", len(r["metrics"]), "metrics", file=sys.stderr)' "${reports[0]}"

# ---------------------------------------------------------------------- the tests that need the daemon
export PUFFER_IMAGE=$IMAGE PUFFER_DOCKER_TESTS=require # they fail rather than skip here
timed "tests marked docker" "$PYTHON" -m pytest -q -rs -m docker tests/test_docker.py
say "passed"

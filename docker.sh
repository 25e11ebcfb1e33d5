#!/usr/bin/env bash
# puffer-bench in Docker: build the image, run the tests or the benchmark in it, open a shell, push.
# Plain shell on purpose: a host with only a driver and Docker (no Python) can use it.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./docker.sh VERB [options] [-- args]

Verbs:
  build [--cpu] [--cuda 12|13] [--tag T] [--base IMAGE]
                                           build images/cuda.Dockerfile (default: CUDA 12) or,
                                           with --cpu, images/cpu.Dockerfile. First fills
                                           images/wheelhouse/FLAVOUR on the host (needs python3
                                           with pip; images/wheelhouse.sh): the image installs only
                                           those wheels, checked against their sha256 lock.
  test  [--cpu] [--cuda N] [--tag T]       run the project's tests in the image; with an NVIDIA
                                           container runtime the GPU is passed in (--gpus all) and
                                           the GPU tests run, otherwise they are reported skipped
  bench [--cpu] [--cuda N] [--tag T] [ARGS...]
                                           puffer-bench run ARGS in the image (e.g. --suite full
                                           --gpu h100); ./results is mounted so reports land on
                                           the host. The CUDA image needs the NVIDIA runtime.
  shell [--cpu] [--cuda N] [--tag T] [-- CMD...]
                                           an interactive shell in the image, or with -- CMD, run
                                           CMD there (e.g. -- puffer-bench info; -- bash -c '...')
  push  [--cpu] [--cuda N] [--tag T]       docker push the image (give --tag REGISTRY/NAME:TAG)

Options:
  --cpu        the CPU-only image (puffer-bench:cpu)
  --cuda N     CUDA major of the GPU image: 12 (default, widest driver support) or 13
  --tag T      image name instead of puffer-bench:cuda12 / :cuda13 / :cpu
  --base IMAGE base image to build on (build only; default python:X.Y-slim for the wheelhouse's
               Python for --cpu, the Dockerfile's CUDA base otherwise; images/debian-base.sh
               makes a local one where no registry can be reached)
  -h, --help   this text

Containers run under an init (--init: docker stop's SIGTERM reaches puffer-bench), without network
(--network none; builds use the host's network for apt), with a /dev/shm sized for multiprocessing.

Environment: DOCKER (docker executable, default: docker); RESULTS (host folder mounted as the
image's results/, default ./results); SHM_SIZE (--shm-size, default half the host's RAM, else 2g);
PYTHON, PYTHON_VERSION, TORCH, TORCH_INDEX (the wheelhouse: see images/wheelhouse.sh);
WHEELHOUSE (the script that makes it, default images/wheelhouse.sh).
EOF
}

die() {
    echo "docker.sh: error: $*" >&2
    exit 1
}

DOCKER=${DOCKER:-docker}
CPU=0
CUDA=12
TAG=""
BASE=""
VERB=""
ARGS=()
IMG=""
GPU_ARGS=()
RUN_ARGS=()

parse() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h | --help)
                usage
                exit 0
                ;;
            --cpu) CPU=1 ;;
            --cuda)
                [ $# -ge 2 ] || die "--cuda needs a value: 12 or 13"
                CUDA=$2
                shift
                ;;
            --cuda=*) CUDA=${1#--cuda=} ;;
            --tag)
                [ $# -ge 2 ] || die "--tag needs an image name, e.g. --tag puffer-bench:dev"
                TAG=$2
                shift
                ;;
            --tag=*) TAG=${1#--tag=} ;;
            --base)
                [ $# -ge 2 ] || die "--base needs an image, e.g. --base python:3.11-slim"
                BASE=$2
                shift
                ;;
            --base=*) BASE=${1#--base=} ;;
            --)
                shift
                ARGS+=("$@")
                return
                ;;
            *) ARGS+=("$1") ;;
        esac
        shift
    done
}

image() {
    if [ -n "$TAG" ]; then
        echo "$TAG"
    elif [ "$CPU" = 1 ]; then
        echo "puffer-bench:cpu"
    else
        echo "puffer-bench:cuda$CUDA"
    fi
}

build_hint() {
    local flags=""
    [ "$CPU" = 1 ] && flags=" --cpu"
    [ "$CPU" = 0 ] && [ "$CUDA" != 12 ] && flags=" --cuda $CUDA"
    [ -n "$TAG" ] && flags="$flags --tag $TAG"
    echo "./docker.sh build$flags"
}

flavour() {
    if [ "$CPU" = 1 ]; then echo cpu; else echo "cuda$CUDA"; fi
}

shm_size() {
    # /dev/shm holds the multiprocessing backend's shared buffers; Docker's default is 64 MB
    if [ -n "${SHM_SIZE:-}" ]; then
        echo "$SHM_SIZE"
    elif [ -r /proc/meminfo ]; then
        awk '/^MemTotal:/ { printf "%dm\n", $2 / 2048 }' /proc/meminfo
    else
        echo 2g
    fi
}

# what every container gets: an init as PID 1, no network, room in /dev/shm
run_args() {
    RUN_ARGS=(--rm --init --network none --shm-size "$(shm_size)")
}

need_docker() {
    command -v "$DOCKER" >/dev/null 2>&1 ||
        die "docker is not installed (no '$DOCKER' on PATH); see https://docs.docker.com/engine/install/"
    "$DOCKER" info >/dev/null 2>&1 ||
        die "the Docker daemon is not reachable ('$DOCKER info' failed): start it, or add your user to the docker group"
}

has_nvidia_runtime() {
    "$DOCKER" info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia
}

need_image() {
    "$DOCKER" image inspect "$1" >/dev/null 2>&1 ||
        die "image $1 is not built yet; build it with: $(build_hint)"
}

set_gpu_args() {
    # GPU_ARGS=(--gpus all) when the GPU image can get the GPU; $1=required makes a missing runtime an error
    GPU_ARGS=()
    [ "$CPU" = 1 ] && return 0
    if has_nvidia_runtime; then
        GPU_ARGS=(--gpus all)
    elif [ "${1:-}" = required ]; then
        die "the NVIDIA container runtime is missing, so the GPU image cannot see the GPU; install the NVIDIA Container Toolkit, or use --cpu"
    fi
}

prepare() {
    # the checks every verb that runs the image needs; sets IMG and GPU_ARGS
    need_docker
    IMG=$(image)
    need_image "$IMG"
    set_gpu_args "${1:-}"
    run_args
}

cmd_build() {
    [ ${#ARGS[@]} -eq 0 ] || die "build takes no arguments besides --cpu, --cuda, --tag, --base (got: ${ARGS[*]})"
    local dockerfile=images/cuda.Dockerfile
    local build_args=()
    if [ "$CPU" = 1 ]; then
        dockerfile=images/cpu.Dockerfile
    else
        build_args=(--build-arg "CUDA_MAJOR=$CUDA")
    fi
    need_docker
    local made python lock wheels wheels_image
    wheels=images/wheelhouse/$(flavour)
    wheels_image=puffer-bench-wheels:$(flavour)
    made=$("${WHEELHOUSE:-images/wheelhouse.sh}" "$(flavour)") || die "the wheelhouse $wheels could not be made (see above)"
    read -r python lock <<<"$made"
    # the wheels as an image of their own (its context is the wheelhouse alone), which the Dockerfile
    # copies them from: the project's build context stays small, with no other flavour's wheels in it
    if [ "$("$DOCKER" image inspect --format '{{ index .Config.Labels "puffer-bench.lock" }}' "$wheels_image" 2>/dev/null)" != "$lock" ]; then
        # the Dockerfile on stdin from a here-string, not a pipe: a pipe's writer can die of SIGPIPE
        # (and pipefail end the script) when docker exits without reading it
        "$DOCKER" build -q --label "puffer-bench.lock=$lock" -t "$wheels_image" -f - "$wheels" >/dev/null \
            <<<$'FROM scratch\nCOPY . /wheels'
    fi
    build_args+=(--build-arg "WHEELS=$wheels_image")
    if [ -z "$BASE" ] && [ "$CPU" = 1 ]; then
        BASE=python:$python-slim
    fi
    [ -z "$BASE" ] || build_args+=(--build-arg "BASE=$BASE")
    # host networking for the build only: apt-get in RUN steps; the images' containers get none
    "$DOCKER" build --network host -f "$dockerfile" "${build_args[@]}" -t "$(image)" .
}

cmd_test() {
    prepare
    if [ "$CPU" = 1 ]; then
        echo "docker.sh: CPU image: GPU tests (marked gpu) will be reported skipped" >&2
    elif [ ${#GPU_ARGS[@]} -gt 0 ]; then
        echo "docker.sh: NVIDIA runtime found: passing --gpus all, GPU tests will run" >&2
    else
        echo "docker.sh: no NVIDIA container runtime: GPU tests (marked gpu) will be reported skipped" >&2
    fi
    # as the image's user (not root), in the image's source tree, importing the installed package;
    # exec: a signal to docker.sh reaches docker run, which hands it to the container
    exec "$DOCKER" run "${RUN_ARGS[@]}" "${GPU_ARGS[@]}" --entrypoint python "$IMG" -m pytest -rs "${ARGS[@]}"
}

results_dir() {
    local dir=${RESULTS:-results}
    mkdir -p "$dir" || die "cannot create the results folder $dir"
    (cd "$dir" && pwd)
}

cmd_bench() {
    prepare required
    local results
    results=$(results_dir)
    [ -w "$results" ] || die "the results folder $results is not writable"
    # as the host user, so the reports on the host are yours
    exec "$DOCKER" run "${RUN_ARGS[@]}" "${GPU_ARGS[@]}" --user "$(id -u):$(id -g)" -v "$results:/opt/puffer-bench/results" \
        "$IMG" run --out results "${ARGS[@]}"
}

cmd_shell() {
    prepare
    local results tty=()
    results=$(results_dir)
    [ -t 0 ] && [ -t 1 ] && tty=(-it)
    if [ ${#ARGS[@]} -eq 0 ]; then
        exec "$DOCKER" run "${RUN_ARGS[@]}" "${tty[@]}" "${GPU_ARGS[@]}" -v "$results:/opt/puffer-bench/results" --entrypoint bash "$IMG"
    else
        exec "$DOCKER" run "${RUN_ARGS[@]}" "${tty[@]}" "${GPU_ARGS[@]}" -v "$results:/opt/puffer-bench/results" --entrypoint "${ARGS[0]}" "$IMG" "${ARGS[@]:1}"
    fi
}

cmd_push() {
    [ ${#ARGS[@]} -eq 0 ] || die "push takes no arguments besides --cpu, --cuda, --tag (got: ${ARGS[*]})"
    prepare
    "$DOCKER" push "$IMG"
}

main() {
    [ $# -gt 0 ] || {
        usage >&2
        exit 2
    }
    VERB=$1
    shift
    case "$VERB" in
        -h | --help | help)
            usage
            exit 0
            ;;
        build | test | bench | shell | push) ;;
        *) die "unknown verb '$VERB'; verbs: build, test, bench, shell, push (./docker.sh --help)" ;;
    esac
    parse "$@"
    case "$CUDA" in
        12 | 13) ;;
        *) die "--cuda must be 12 or 13, got '$CUDA'" ;;
    esac
    cd "$(dirname "$0")"
    "cmd_$VERB"
}

main "$@"

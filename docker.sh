#!/usr/bin/env bash
# puffer-bench in Docker: build the image, run the tests or the benchmark in it, open a shell, push.
# Plain shell on purpose: a host with only a driver and Docker (no Python) can use it.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./docker.sh VERB [options] [-- args]

Verbs:
  build [--cpu] [--cuda 12|13] [--tag T]   build images/cuda.Dockerfile (default: CUDA 12) or,
                                           with --cpu, images/cpu.Dockerfile
  test  [--cpu] [--cuda N] [--tag T]       run the project's tests in the image; with an NVIDIA
                                           container runtime the GPU is passed in (--gpus all) and
                                           the GPU tests run, otherwise they are reported skipped
  bench [--cpu] [--cuda N] [--tag T] [ARGS...]
                                           puffer-bench run ARGS in the image (e.g. --suite full
                                           --gpu h100); ./results is mounted so reports land on
                                           the host. The CUDA image needs the NVIDIA runtime.
  shell [--cpu] [--cuda N] [--tag T]       an interactive shell in the image
  push  [--cpu] [--cuda N] [--tag T]       docker push the image (give --tag REGISTRY/NAME:TAG)

Options:
  --cpu        the CPU-only image (puffer-bench:cpu)
  --cuda N     CUDA major of the GPU image: 12 (default, widest driver support) or 13
  --tag T      image name instead of puffer-bench:cuda12 / :cuda13 / :cpu
  -h, --help   this text

Environment: DOCKER (docker executable, default: docker).
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
VERB=""
ARGS=()
IMG=""
GPU_ARGS=()

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
}

cmd_build() {
    [ ${#ARGS[@]} -eq 0 ] || die "build takes no arguments besides --cpu, --cuda, --tag (got: ${ARGS[*]})"
    local dockerfile=images/cuda.Dockerfile
    local build_args=()
    if [ "$CPU" = 1 ]; then
        dockerfile=images/cpu.Dockerfile
    else
        case "$CUDA" in
            12) build_args=(--build-arg CUDA_MAJOR=12 --build-arg CUDA_VERSION=12.8.1
                --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128) ;;
            13) build_args=(--build-arg CUDA_MAJOR=13 --build-arg CUDA_VERSION=13.0.1
                --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130) ;;
            *) die "--cuda must be 12 or 13, got '$CUDA'" ;;
        esac
    fi
    need_docker
    "$DOCKER" build -f "$dockerfile" "${build_args[@]}" -t "$(image)" .
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
    "$DOCKER" run --rm "${GPU_ARGS[@]}" --entrypoint python "$IMG" -m pytest -rs "${ARGS[@]}"
}

cmd_bench() {
    prepare required
    mkdir -p results
    "$DOCKER" run --rm "${GPU_ARGS[@]}" --user "$(id -u):$(id -g)" -v "$PWD/results:/opt/puffer-bench/results" \
        "$IMG" run --out results "${ARGS[@]}"
}

cmd_shell() {
    prepare
    "$DOCKER" run --rm -it "${GPU_ARGS[@]}" -v "$PWD/results:/opt/puffer-bench/results" --entrypoint bash "$IMG" "${ARGS[@]}"
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

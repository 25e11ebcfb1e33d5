#!/usr/bin/env bash
# The wheelhouse an image installs from: every Python package the image needs, downloaded by the host
# (which can reach the package index; a build container may not), locked by sha256.
#
#   images/wheelhouse.sh FLAVOUR [DIR]     FLAVOUR: cpu, cuda12 or cuda13; DIR: images/wheelhouse/FLAVOUR
#
# Prints the Python version the wheels are for and the lock's sha256 (the only output on stdout).
# DIR gets the wheels, requirements.lock (name==version --hash=sha256:..., for pip --require-hashes;
# copied into the image, where `puffer-bench info` shows it), PYTHON (the Python version the wheels are
# for) and inputs.sha256. The wheelhouse is kept while its inputs (pyproject.toml, flavour, Python
# version, TORCH, TORCH_INDEX) are unchanged, so rebuilding an image installs the same bytes; delete DIR
# (or change an input) to download afresh. The project itself is not in it: the image builds it from
# the source tree.
#
# Environment:
#   PYTHON          interpreter that runs pip (default python3)
#   PYTHON_VERSION  Python the image has, e.g. 3.12 (default: PYTHON's); another version than PYTHON's
#                   downloads binary wheels only, for manylinux x86_64
#   TORCH           torch requirement (default torch)
#   TORCH_INDEX     index torch comes from; default PyTorch's cpu, cu128 or cu130 index by flavour
#                   (the CUDA builds carry their CUDA runtime as nvidia-* wheels). Set it empty to
#                   take torch from pip's configured indexes (PyPI, or a local wheel).
set -euo pipefail

die() {
    echo "wheelhouse.sh: error: $*" >&2
    exit 1
}

FLAVOUR=${1:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${2:-$ROOT/images/wheelhouse/$FLAVOUR}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch}
case "$FLAVOUR" in
    cpu)
        EXTRAS=dev,docker
        TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
        ;;
    cuda12)
        EXTRAS=cuda12,dev,docker
        TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cu128}
        ;;
    cuda13)
        EXTRAS=cuda13,dev,docker
        TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cu130}
        ;;
    *) die "flavour must be cpu, cuda12 or cuda13, got '$FLAVOUR'" ;;
esac

command -v "$PYTHON" >/dev/null 2>&1 || die "no '$PYTHON' on PATH: preparing the wheelhouse needs a Python with pip (set PYTHON)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' does not work: preparing the wheelhouse needs pip"
HOST_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYTHON_VERSION=${PYTHON_VERSION:-$HOST_VERSION}
[[ "$PYTHON_VERSION" =~ ^3\.[0-9]+$ ]] || die "PYTHON_VERSION must look like 3.12, got '$PYTHON_VERSION'"

# Wheels for another Python than the one running pip: binary only, for the glibc of current bases.
TARGET=()
if [ "$PYTHON_VERSION" != "$HOST_VERSION" ]; then
    TAG=cp${PYTHON_VERSION/./}
    TARGET=(--only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp --abi "$TAG"
        --platform manylinux2014_x86_64 --platform linux_x86_64)
    for glibc in $(seq 17 39); do
        TARGET+=(--platform "manylinux_2_${glibc}_x86_64")
    done
fi

INPUTS=$(
    cat "$ROOT/pyproject.toml"
    echo "$FLAVOUR $PYTHON_VERSION $TORCH ${TORCH_INDEX:-configured}"
) || die "cannot read $ROOT/pyproject.toml"
STAMP=$(printf '%s' "$INPUTS" | sha256sum | cut -d' ' -f1)
if [ -f "$DIR/inputs.sha256" ] && [ "$(cat "$DIR/inputs.sha256")" = "$STAMP" ] && [ -f "$DIR/requirements.lock" ]; then
    echo "wheelhouse $DIR is up to date ($(grep -c -- --hash "$DIR/requirements.lock") wheels)" >&2
    echo "$(cat "$DIR/PYTHON") $(sha256sum "$DIR/requirements.lock" | cut -d' ' -f1)"
    exit 0
fi

NEW="$DIR.new.$$"
trap 'rm -rf "$NEW"' EXIT
mkdir -p "$NEW"
PIP=("$PYTHON" -m pip --disable-pip-version-check download --quiet --dest "$NEW" "${TARGET[@]}")
echo "wheelhouse: $FLAVOUR for Python $PYTHON_VERSION into $DIR (torch: $TORCH from ${TORCH_INDEX:-the configured indexes})" >&2
# torch first, from its own index: the build that fits the flavour
if [ -n "$TORCH_INDEX" ]; then
    "${PIP[@]}" --index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple "$TORCH"
else
    "${PIP[@]}" "$TORCH"
fi
TORCH_WHEEL=$(find "$NEW" -maxdepth 1 -name "torch-*.whl" -printf "%f\n" | head -n 1)
[ -n "$TORCH_WHEEL" ] || die "no torch wheel was downloaded for '$TORCH'"
TORCH_PIN=torch==$(echo "$TORCH_WHEEL" | cut -d- -f2)
# then everything the project needs, holding torch to the wheel just fetched
"${PIP[@]}" --find-links "$NEW" "$TORCH_PIN" setuptools wheel "${ROOT}[$EXTRAS]"

"$PYTHON" - "$NEW" <<'EOF'
import hashlib, sys
from pathlib import Path

folder = Path(sys.argv[1])
lines = []
for wheel in sorted(folder.glob("*.whl")):
    name, version = wheel.name.split("-")[:2]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lines.append(f"{name}=={version} --hash=sha256:{digest}  # {wheel.name}")
rest = [p.name for p in folder.iterdir() if p.suffix != ".whl"]
if rest:
    sys.exit(f"wheelhouse.sh: error: not wheels (no binary for this platform?): {', '.join(sorted(rest))}")
(folder / "requirements.lock").write_text("\n".join(lines) + "\n")
EOF
echo "$PYTHON_VERSION" >"$NEW/PYTHON"
echo "$STAMP" >"$NEW/inputs.sha256"
rm -rf "$DIR"
mv "$NEW" "$DIR"
trap - EXIT
echo "wheelhouse: $(grep -c -- --hash "$DIR/requirements.lock") wheels, $(du -sh "$DIR" | cut -f1)" >&2
echo "$(cat "$DIR/PYTHON") $(sha256sum "$DIR/requirements.lock" | cut -d' ' -f1)"

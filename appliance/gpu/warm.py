"""Warm the cupy kernel cache: compile every ``kernels/*.cu`` for a list of GPU architectures.

Run at image build time (``python -m appliance.gpu.warm --archs 80 90``) so the first training run
does not pay NVRTC compile time. Compiling needs NVRTC (the CUDA toolchain) but no GPU: the
architecture is named explicitly. The cache lands in ``CUPY_CACHE_DIR``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from appliance.paths import data_dir

# The options every kernel is compiled with; the runtime loader uses the same so the cache hits.
OPTIONS = ("-std=c++17",)


def kernel_sources() -> list[Path]:
    return sorted(data_dir("kernels").glob("*.cu"))


def compile_all(archs: list[str], log=print) -> int:
    """Compile each kernel source for each arch into the cupy cache; return the number compiled."""
    sources = kernel_sources()
    if not sources:
        log(f"no kernels/*.cu under {data_dir('kernels')}: nothing to compile")
        return 0
    from cupy.cuda import compiler

    count = 0
    for path in sources:
        code = path.read_text()
        for arch in archs:
            start = time.perf_counter()
            compiler.compile_with_cache(code, options=OPTIONS, arch=arch)
            log(f"compiled {path.name} for sm_{arch} in {time.perf_counter() - start:.1f} s")
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", nargs="+", required=True, help="compute capabilities, e.g. 80 90 120")
    args = parser.parse_args(argv)
    bad = [a for a in args.archs if not a.isdigit()]
    if bad:
        parser.error(f"--archs takes compute capabilities such as 80 or 90, got {' '.join(bad)}")
    try:
        compile_all(args.archs)
    except ImportError as e:
        print(
            f"error: cupy is not installed ({e}); install puffer-bench[cuda12] or [cuda13]", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

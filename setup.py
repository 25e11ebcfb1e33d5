"""Build glue that pyproject.toml cannot express: the C extension and the shipped data trees.

* ``appliance._ocean`` is compiled from ``envs/`` with ``-O3``. Builds are portable by default;
  set ``PUFFER_NATIVE=1`` to add ``-march=native`` for a machine-tuned local build.
* ``envs/``, ``kernels/`` and ``bench/`` live at the top of the checkout (DESIGN.md) and are copied
  into ``appliance/_data/`` of the built package, so ``pip install .`` works outside the checkout.
"""

import os
import shutil
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
DATA_TREES = ("envs", "kernels", "bench")


def _compile_args() -> list[str]:
    args = ["-O3", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
    # keep the compile flags inside the extension, so reports can say how the envs were built
    args.append("-frecord-gcc-switches")
    if os.environ.get("PUFFER_NATIVE", "0") not in ("", "0"):
        args.append("-march=native")
    return args


class BuildPyWithData(build_py):
    """Copy the data trees next to the Python sources of the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout directly (appliance.paths)
        for name in DATA_TREES:
            src = ROOT / name
            dst = Path(self.build_lib) / "appliance" / "_data" / name
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("build", "*.o", "__pycache__"))


ocean = Extension(
    "appliance._ocean",
    sources=["envs/binding.c", "envs/vecenv.c"],
    include_dirs=["envs"],
    depends=[str(p.relative_to(ROOT)) for p in sorted((ROOT / "envs").glob("*.h"))],
    extra_compile_args=_compile_args(),
    extra_link_args=["-pthread"],
)

setup(
    packages=find_packages(include=["appliance", "appliance.*"]),
    ext_modules=[ocean],
    cmdclass={"build_py": BuildPyWithData},
)

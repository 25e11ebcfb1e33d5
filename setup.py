"""Build glue that pyproject.toml cannot express: the C extension and the shipped data trees.

* ``appliance._ocean`` is compiled from ``envs/`` with ``-O3``; ``appliance._hostkernels`` from
  ``kernels/host.cpp``, the fused kernels' bodies for the CPU trainer. Builds are portable by default;
  set ``PUFFER_NATIVE=1`` to add ``-march=native`` for a machine-tuned local build.
* ``envs/``, ``kernels/`` and ``bench/`` live at the top of the checkout (docs/architecture.md). ``package_dir``
  maps each to ``appliance/_data/<name>`` in a wheel, with the files ``DATA`` lists as package
  data, so ``pip install .`` works outside the checkout; ``appliance.paths`` finds them either way.
* A wheel also carries the fused kernels compiled to cubins for the usual GPU architectures when
  NVRTC is installed at build time (the ``kernels`` extra); without it they compile at first use.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
DATA = {
    "envs": ["*.h", "*.c", "compat3/*.h", "compat4/*.h"],
    "kernels": ["*.cu", "*.cuh", "*.md"],
    "bench": ["suites/*.yaml", "profiles/*.yaml"],
}


def _compile_args() -> list[str]:
    args = ["-O3", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
    # keep the compile flags inside the extension, so reports can say how the envs were built
    args.append("-frecord-gcc-switches")
    if os.environ.get("PUFFER_NATIVE", "0") not in ("", "0"):
        args.append("-march=native")
    return args


class BuildPyWithCubins(build_py):
    """After the usual build, compile kernels/*.cu to cubins inside the built package (not for editable
    installs, which compile at first use from the checkout)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        sys.path.insert(0, str(ROOT))
        from appliance.gpu.warm import build_wheel_cubins

        build_wheel_cubins(Path(self.build_lib) / "appliance" / "_data" / "kernels")


ocean = Extension(
    "appliance._ocean",
    sources=["envs/binding.c", "envs/engine_binding.c", "envs/vecenv.c", "envs/engine.c"],
    include_dirs=["envs"],
    depends=[str(p.relative_to(ROOT)) for p in sorted((ROOT / "envs").glob("*.h"))],
    extra_compile_args=_compile_args(),
    extra_link_args=["-pthread"],
    libraries=["dl"],  # the engine resolves the CUDA driver at run time (dlopen), never at link time
)

# The kernels' bodies (kernels/*.cuh) compiled for the CPU: appliance/gpu/host.py calls them, after
# torch is loaded, so the library's libgomp.so.1 is torch's own and its threads are torch's team.
hostkernels = Extension(
    "appliance._hostkernels",
    sources=["kernels/host.cpp"],
    include_dirs=["kernels"],
    depends=[str(p.relative_to(ROOT)) for p in sorted((ROOT / "kernels").glob("*.cuh"))],
    extra_compile_args=["-O3", "-std=c++17", "-Wall", "-fopenmp", "-frecord-gcc-switches"]
    + (["-march=native"] if os.environ.get("PUFFER_NATIVE", "0") not in ("", "0") else []),
    extra_link_args=["-pthread", "-fopenmp"],
    language="c++",
)

setup(
    packages=find_packages(include=["appliance", "appliance.*"]) + [f"appliance._data.{n}" for n in DATA],
    package_dir={f"appliance._data.{n}": n for n in DATA},
    package_data={
        "appliance": [
            "defaults/*.yaml",
            "defaults/envs/*.yaml",
            "defaults/gymnasium/*.yaml",
            "defaults/families/*.yaml",
        ],
        **{f"appliance._data.{n}": globs for n, globs in DATA.items()},
    },
    ext_modules=[ocean, hostkernels],
    cmdclass={"build_py": BuildPyWithCubins},
)

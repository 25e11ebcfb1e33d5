"""Where the data the package ships lives: one lookup for every reader.

* ``defaults/``: ``default.yaml`` and ``envs/<env>.yaml``, inside the package.
* ``envs/`` (C sources), ``kernels/`` (CUDA sources) and ``bench/`` (suites, hardware profiles) sit
  at the top of the checkout (docs/architecture.md). A wheel carries them as ``appliance/_data/<name>``
  (``setup.py`` maps them there with ``package_dir``; nothing is copied by hand); an editable
  install or a plain checkout reads the top-level folders.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_TREES = ("envs", "kernels", "bench")
_INSTALLED = PACKAGE_DIR / "_data"
_CHECKOUT = PACKAGE_DIR.parent


def data_dir(name: str) -> Path:
    """Return the folder ``name`` (``"envs"``, ``"kernels"`` or ``"bench"``)."""
    if name not in DATA_TREES:
        raise ValueError(f"unknown data folder {name!r}; shipped: {', '.join(DATA_TREES)}")
    for root in (_INSTALLED, _CHECKOUT):
        path = root / name
        if path.is_dir():
            return path
    raise FileNotFoundError(f"data folder {name!r} is neither in {_INSTALLED} nor in {_CHECKOUT}")


def repo_path(path: str | Path) -> str:
    """A shipped file by its path in the repository (``appliance/defaults/...``, ``bench/profiles/...``),
    from a checkout and from a wheel alike (a wheel keeps bench/ under ``appliance/_data/``); any other
    file as given."""
    resolved = Path(path).resolve()
    for root in (PACKAGE_DIR / "_data", PACKAGE_DIR.parent):
        try:
            return resolved.relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
    return str(path)


def defaults_dir() -> Path:
    """Folder of ``default.yaml`` and ``envs/<name>.yaml``."""
    return PACKAGE_DIR / "defaults"


def checkout_root() -> Path | None:
    """The git checkout the package runs from, if any (for the commit in fingerprints)."""
    return _CHECKOUT if (_CHECKOUT / ".git").exists() and not _INSTALLED.is_dir() else None

"""Where the shipped data trees (envs/, kernels/, bench/) live.

In a checkout (or an editable install) they are the top-level folders; in an installed wheel
``setup.py`` copies them to ``appliance/_data/``. Every reader goes through :func:`data_dir`.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_INSTALLED = PACKAGE_DIR / "_data"
_CHECKOUT = PACKAGE_DIR.parent


def data_dir(name: str) -> Path:
    """Return the folder ``name`` (``"envs"``, ``"kernels"`` or ``"bench"``)."""
    for root in (_INSTALLED, _CHECKOUT):
        path = root / name
        if path.is_dir():
            return path
    raise FileNotFoundError(f"data folder {name!r} is neither in {_INSTALLED} nor in {_CHECKOUT}")


def config_dir() -> Path:
    """Folder of ``default.yaml`` and ``envs/<name>.yaml``."""
    return PACKAGE_DIR / "config"


def checkout_root() -> Path | None:
    """The git checkout the package runs from, if any (for the commit in fingerprints)."""
    return _CHECKOUT if (_CHECKOUT / ".git").exists() and not _INSTALLED.is_dir() else None

"""A wheel of this project, built once a session, and a virtual environment to install it
into without fetching anything."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(where: Path) -> Path:
    """A wheel of this project, built from a copy of the tree (a build leaves `build/`
    behind, and stale files there would end up in later wheels)."""
    source = where / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(where / "dist"), str(source)], check=True, capture_output=True,
                   timeout=240)
    return next((where / "dist").glob("omniroute_tui-*.whl"))


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for the tests that install it (none changes it)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def fresh_venv(where: Path) -> Path:
    """A virtual environment without pip or site packages of its own making: the
    dependencies (and pip) come from the test's environment by a path, so nothing is
    fetched; that environment's .pth files, among them the editable install of this tree,
    are not read from there, so the project exists there only once a wheel is installed.
    Returns its site-packages folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=60)
    site = Path(subprocess.run([str(where / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return site

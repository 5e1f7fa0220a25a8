"""A wheel built from the tree, installed into a fresh virtual environment, runs the
shipped scenarios and the console's demo: nothing it needs is left in the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONSOLE = textwrap.dedent("""
    import asyncio, simulator, omniroute_tui
    from omniroute_tui.console.cli import _parser, build_app

    async def main():
        app = build_app(_parser().parse_args([]))
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.5)
            title = app.backend.title
            await pilot.press("q")
        print(simulator.__file__)
        print(omniroute_tui.__file__)
        print("title", title)

    asyncio.run(main())
""")


def _run(*args: str | Path, cwd: Path, timeout: float = 240) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_wheel_in_a_fresh_venv_runs_scenarios_and_the_demo(tmp_path: Path) -> None:
    # built from a copy: a build leaves `build/` behind, and stale files there would
    # end up in later wheels
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist",
         source, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("omniroute_tui-*.whl"))
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).strip())
    # the dependencies come from the test's own environment, by a path (its .pth files,
    # among them the editable install of this tree, are not read from there)
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q",
         wheel, cwd=tmp_path)

    listed = _run(venv / "bin" / "omniroute-sim", "list", cwd=tmp_path)
    assert "429-storm" in listed and "hour-long-mixed" in listed
    _run(venv / "bin" / "omniroute-sim", "run", "429-storm", "--check", cwd=tmp_path)
    lessons = _run(venv / "bin" / "omniroute-sim", "lessons", cwd=tmp_path)
    assert "1-cooldown-ladder" in lessons and "invalid" not in lessons, lessons
    _run(venv / "bin" / "omniroute-sim", "lesson", "7-the-herd", cwd=tmp_path)
    out = _run(python, "-c", CONSOLE, cwd=tmp_path).splitlines()
    assert out[0].startswith(str(site)) and out[1].startswith(str(site)), out
    assert "demo" in out[2], out

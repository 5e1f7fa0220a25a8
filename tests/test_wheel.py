"""A wheel built from the tree (`wheel_helpers`), installed into a fresh virtual environment,
runs the shipped scenarios and the console's demo: nothing it needs is left in the source
tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from .wheel_helpers import fresh_venv

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


def test_a_wheel_in_a_fresh_venv_runs_scenarios_and_the_demo(tmp_path: Path,
                                                             wheel: Path) -> None:
    venv = tmp_path / "venv"
    site = fresh_venv(venv)
    python = venv / "bin" / "python"
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

"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from omniroute_tui.engine import Classification
from omniroute_tui.router import Attempt, Response

README = Path(__file__).parent.parent / "README.md"

ROUTER_YAML = """\
providers:
  openai:
    base_url: http://127.0.0.1:9/v1
    models: [gpt-4o-mini]
    connections: [{id: main, api_key: sk-readme-example-0001}]
routes:
  my-route: {targets: [openai/gpt-4o-mini]}
"""


def section_code(title: str) -> str:
    text = README.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python example under {title!r}"
    return match.group(1)


def test_driving_the_core_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "router.yaml").write_text(ROUTER_YAML)
    monkeypatch.chdir(tmp_path)
    names: dict[str, object] = {}
    exec(compile(section_code("Driving the core"), "README.md", "exec"), names)
    step, routing = names["step"], names["routing"]
    assert isinstance(step, Attempt)
    assert (step.provider, step.connection, step.model) == ("openai", "main", "gpt-4o-mini")
    routing.record(200, Classification(None))  # type: ignore[attr-defined]
    answer = routing.next_step()  # type: ignore[attr-defined]
    assert isinstance(answer, Response) and answer.upstream is step

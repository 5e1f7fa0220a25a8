"""A config past its counts is refused from its YAML events, before its node tree is
built (omniroute_tui/config/prescan.py): the first count past its cap is named with its
line, however the file is written."""

from __future__ import annotations

import tracemalloc

import pytest
import yaml

from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.config.prescan import MAX_EVENTS


def provider(n_connections: int, models: int = 1) -> dict[str, object]:
    return {"base_url": "http://127.0.0.1:9/v1", "models": [f"m{i}" for i in range(models)],
            "connections": [{"id": f"k{i}", "api_key": f"sk-test-key-{i:08d}"}
                            for i in range(n_connections)]}


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_router_config("big.yaml", text=text, env={})
    return str(info.value.problems[0])


def test_a_provider_with_too_many_connections_is_named_at_the_first_one_past_the_cap() -> None:
    text = yaml.safe_dump({"providers": {"p": provider(1_001)}})
    said = refusal(text)
    assert said.startswith("big.yaml:")
    assert "providers.p.connections: more than 1,000 connections" in said
    line = int(said.split(":")[1])  # the line of the key, as the full load names it
    assert text.splitlines()[line - 1].strip() == "connections:"


@pytest.mark.parametrize(("data", "said"), [
    ({"providers": {f"p{i}": provider(1) for i in range(101)}},
     "providers: more than 100 providers: at most 100 providers"),
    ({"providers": {"p": provider(1, models=1_001)}},
     "providers.p.models: more than 1,000 models"),
    ({"providers": {f"p{i}": provider(1_000) for i in range(11)}},
     "providers: more than 10,000 connections: at most 10,000 connections in all"),
    ({"providers": {"p": provider(1)}, "routes": {f"r{i}": {"targets": ["p/m0"]}
                                                  for i in range(1_001)}},
     "routes: more than 1,000 routes"),
    ({"providers": {"p": provider(1)}, "routes": {"r": {"targets": ["p/m0"] * 101}}},
     "routes.r.targets: more than 100 targets"),
])
def test_every_capped_count_is_refused_before_the_parse(data: dict[str, object], said: str
                                                        ) -> None:
    assert said in refusal(yaml.safe_dump(data))


def test_a_million_connections_in_flow_style_cost_a_walk_of_the_first_thousand() -> None:
    names = ",".join(f"k{i}" for i in range(1_000_000))  # 6.9 MB, under the 8 MiB cap
    text = f"providers:\n  p: {{base_url: 'http://127.0.0.1:9/v1', models: [m], " \
           f"connections: [{names}]}}\n"
    tracemalloc.start()
    try:
        said = refusal(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "more than 1,000 connections" in said
    # no node tree: what is held is the text and the walk's few frames (the tree of this
    # file took hundreds of MB)
    assert peak < 4 * len(text)


def test_a_file_of_values_past_any_config_is_refused_by_their_number() -> None:
    text = "resilience:\n  junk: [" + ",".join("1" for _ in range(MAX_EVENTS)) + "]\n"
    assert f"(file): more than {MAX_EVENTS:,} values" in refusal(text)


def test_the_largest_config_the_caps_allow_loads() -> None:
    data = {"providers": {f"p{i}": provider(1_000) for i in range(10)},
            "routes": {"r": {"targets": [f"p{i}/m0" for i in range(10)]}}}
    config = load_router_config("max.yaml", text=yaml.safe_dump(data), env={})
    assert sum(len(p.connections) for p in config.providers.values()) == 10_000


@pytest.mark.parametrize("text", ["providers: {p: [", "providers: &a [*a]", "? [a, b]\n: c\n",
                                  "providers:\n  ? {x: 1}\n  : 2\n", "- 1\n- 2\n"])
def test_odd_and_broken_yaml_is_left_to_the_full_load_to_explain(text: str) -> None:
    with pytest.raises(ConfigError):
        load_router_config("odd.yaml", text=text, env={})

"""Router config loading: shape, overrides, secrets, and errors with file:line:field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.config import ConfigError, load_router_config, parse_duration_ms
from omniroute_tui.config.secrets import mask_secret
from omniroute_tui.engine import FailureKind
from omniroute_tui.router import Strategy

GOOD = """\
resilience: {jitter: 0.1, cooldown: {base: 2s}, request: {max_attempts: 4}}
providers:
  alpha:
    auth: apikey
    base_url: http://127.0.0.1:9/v1
    models: [m, n]
    resilience:
      breaker:
        failure_threshold: 4
        kinds: {quota_exhausted: {immediate_open: true, reset_timeout: 10m}}
    connections:
      - {id: a, api_key: sk-alpha-secret-0001}
      - {id: b, api_key: "${ALPHA_KEY}", weight: 3}
  beta:
    auth: oauth
    per_model_quota: true
    models: [m]
    connections: [x]
routes:
  r: {strategy: round_robin, targets: [alpha/m, beta/m]}
store: {path: state.db}
gateway: {listen: "127.0.0.1:4000", token_file: token.txt}
"""


def load(text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return load_router_config("router.yaml", text=text, env=env or {"ALPHA_KEY": "sk-env-9876"})


def test_a_good_file_loads_with_layered_overrides() -> None:
    config = load(GOOD)
    alpha, beta = config.providers["alpha"], config.providers["beta"]
    assert alpha.settings.breaker.failure_threshold == 4
    assert alpha.settings.cooldown.base_ms == 2000  # global override
    assert alpha.settings.jitter == 0.1
    assert alpha.settings.breaker.opens_immediately(FailureKind.QUOTA_EXHAUSTED)
    assert alpha.settings.breaker.base_reset_ms(FailureKind.QUOTA_EXHAUSTED) == 600_000
    assert beta.settings.breaker.failure_threshold == 3  # oauth default
    assert beta.settings.cooldown.base_ms == 2000  # global override over oauth default
    assert beta.per_model_quota
    assert alpha.connections[1].api_key is not None
    assert alpha.connections[1].api_key.reveal() == "sk-env-9876"
    assert alpha.connections[1].weight == 3
    assert [c.id for c in beta.connections] == ["x"]
    assert config.routes["r"].strategy is Strategy.ROUND_ROBIN
    assert config.settings.request.max_attempts == 4
    assert (config.store_path, config.gateway_listen) == ("state.db", "127.0.0.1:4000")


def test_secrets_never_show_in_full() -> None:
    config = load(GOOD)
    key = config.providers["alpha"].connections[0].api_key
    assert "secret" not in repr(config) and "sk-alpha" not in str(key)
    assert str(key) == "…0001"
    assert mask_secret("short") == "…"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("providers: {}\n", "router.yaml:1: providers: no providers: name at least one"),
        ("providers:\n  a: {models: [m], connections: [k], auth: token}\n",
         "router.yaml:2: providers.a.auth: expected apikey or oauth, got 'token'"),
        ("providers:\n  a:\n    models: [m]\n    connections: [k]\n    colour: red\n",
         "router.yaml:5: providers.a.colour: unknown field"),
        ("providers:\n  a:\n    models: [m]\n    connections:\n      - {id: k, api_key: "
         "'${NOPE}'}\n",
         "router.yaml:5: providers.a.connections[0].api_key: environment variable NOPE is not"),
        ("providers:\n  a: {models: [m], connections: [k]}\nroutes:\n  r: {targets: [a/zz]}\n",
         "router.yaml:4: routes.r.targets[0]: provider 'a' has no model 'zz'"),
        ("providers:\n  a:\n    models: [m]\n    connections: [k]\n    resilience:\n"
         "      cooldown: {base: fast}\n",
         "router.yaml:6: providers.a.resilience.cooldown.base: 'fast' is not a duration"),
        ("providers:\n  a: {models: [m], connections: [k, k]}\n",
         "router.yaml:2: providers.a.connections[1].id: connection 'k' is listed twice"),
        ("resilience:\n  breaker: {degraded_threshold: 9}\nproviders:\n  a: {models: [m], "
         "connections: [k]}\n",
         "router.yaml:2: resilience.breaker.degraded_threshold: 9 is above failure_threshold 5"),
        ("providers: [1, 2\n", "router.yaml:2: (syntax): YAML syntax"),
        ("", "router.yaml:1: (top level): the file is empty"),
        ("- a\n- b\n", "router.yaml:1: (top level): expected a mapping"),
    ],
)
def test_errors_name_file_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(text)
    assert expected in str(info.value)


@pytest.mark.parametrize(("text", "line", "reason"), [
    # libyaml words these "did not find expected ',' or ']'" and "... in this context"
    ("providers: [1, 2\n", 2, "expected ',' or ']', but got '<stream end>'"),
    ("providers:\n  a: b: c\n", 2, "mapping values are not allowed here"),
    # libyaml takes the tab for a space and would read these files
    ("providers:\t{}\n", 1, "found character '\\t' that cannot start any token"),
    ("providers: {a: 1,\tb: 2}\n", 1, "found character '\\t' that cannot start any token"),
])
def test_a_syntax_error_reads_the_same_whichever_parser_pyyaml_has(
        text: str, line: int, reason: str) -> None:
    """A file is parsed with libyaml where PyYAML has it (a large one in a tenth of the
    time); what it refuses, and every text with a tab, the pure-Python parser reads again,
    so that the same files are refused for the same reason on every machine."""
    with pytest.raises(ConfigError) as info:
        load(text)
    (problem,) = info.value.problems
    assert (problem.line, problem.field, problem.reason) == (line, "(syntax)",
                                                             f"YAML syntax: {reason}")


def test_every_problem_is_reported_at_once() -> None:
    text = "providers:\n  a: {models: [], connections: []}\nroutes:\n  r: {targets: [b/m]}\n"
    with pytest.raises(ConfigError) as info:
        load(text)
    assert len(info.value.problems) == 3


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_router_config(tmp_path / "absent.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(ConfigError, match="binary data"):
        load_router_config(binary)
    with pytest.raises(ConfigError, match="is a directory"):
        load_router_config(tmp_path)


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(ConfigError, match="too many values"):
        load("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("3s", 3000), ("1.5s", 1500), ("5m", 300_000), ("1h", 3_600_000),
     ("1m30s", 90_000), (1200, 1200)],
)
def test_durations(text: str | int, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("bad", ["", "3", "3x", "-1s", True, None, -5, "s"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(bad)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_loads_or_is_refused_clearly(text: str) -> None:
    try:
        load(text)
    except ConfigError as exc:
        assert exc.problems and all(p.file == "router.yaml" for p in exc.problems)


def test_gateway_limits_are_read_from_the_config() -> None:
    base = ("providers:\n  p: {models: [m], connections: [a]}\n"
            "routes: {r: {targets: [p/m]}}\n")
    config = load_router_config("r.yaml", text=base + (
        "gateway: {limits: {max_body_bytes: 1024, head_timeout: 2s, keep_alive: 500ms}}\n"))
    limits = config.gateway_limits
    assert (limits.max_body_bytes, limits.head_timeout_s, limits.keep_alive_s) == (1024, 2, 0.5)
    assert limits.max_head_bytes == 32 * 1024  # the rest keep their defaults
    with pytest.raises(ConfigError) as info:
        load_router_config("r.yaml", text=base + (
            "gateway:\n  limits: {max_body: 5, head_timeout: 0s, max_json_depth: -1}\n"))
    reasons = " | ".join(f"{p.field}: {p.reason}" for p in info.value.problems)
    assert "max_body" in reasons and "head_timeout" in reasons and "max_json_depth" in reasons


def test_a_fleet_store_is_a_redis_url_and_not_a_file_too() -> None:
    base = ("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
            "connections: [{id: a, api_key: sk-test-key-00001}]}\nroutes:\n"
            "  r: {targets: [p/m]}\n")
    config = load_router_config("r.yaml", text=base + "store: {redis: 'redis://127.0.0.1:6379/0',"
                                                      " prefix: shop}\n")
    assert (config.store_redis, config.store_prefix, config.store_path) == (
        "redis://127.0.0.1:6379/0", "shop", None)
    for store, words in (("{redis: 'http://x'}", "redis:// , rediss://, unix:// or "
                                                 "redis+sentinel://"),
                         ("{path: s.db, redis: 'redis://h'}", "give store.path (one router)")):
        with pytest.raises(ConfigError) as caught:
            load_router_config("r.yaml", text=base + f"store: {store}\n")
        assert words.replace(" ,", ",") in str(caught.value)


def test_a_fleet_behind_sentinel_as_a_url_or_a_mapping() -> None:
    base = ("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
            "connections: [{id: a, api_key: sk-test-key-00001}]}\nroutes:\n"
            "  r: {targets: [p/m]}\n")
    url = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/1"
    assert load_router_config("r.yaml", text=base + f"store: {{redis: '{url}'}}\n"
                              ).store_redis == url
    mapping = load_router_config("r.yaml", text=base + (
        "store:\n  redis:\n    sentinels: [127.0.0.1:26379, 'sentinel-b']\n"
        "    service: mymaster\n    db: 1\n    password: 'p@ss'\n"))
    assert mapping.store_redis == (
        "redis+sentinel://:p%40ss@127.0.0.1:26379,sentinel-b:26379/mymaster/1")
    with pytest.raises(ConfigError) as caught:
        load_router_config("r.yaml", text=base + (
            "store:\n  redis:\n    sentinels: [127.0.0.1:26379, 'b:x']\n"
            "    db: -1\n    mode: fast\n"))
    assert sorted(str(p) for p in caught.value.problems) == sorted([
        "r.yaml:7: store.redis.sentinels[1]: a sentinel's port is 1-65535, not 'x' (in 'b:x')",
        "r.yaml:6: store.redis.service: missing field: the master's name in Sentinel "
        "(its `sentinel monitor NAME ...`)",
        "r.yaml:8: store.redis.db: expected a whole number >= 0, got -1",
        "r.yaml:9: store.redis.mode: unknown field; expected one of: db, password, "
        "sentinels, service",
    ])
    with pytest.raises(ConfigError) as caught:
        load_router_config("r.yaml", text=base + "store: {redis: {sentinels: [], "
                                                 "service: m}}\n")
    assert "store.redis.sentinels: expected a list of HOST:PORT" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load_router_config("r.yaml", text=base + "store: {redis: 'redis+sentinel://a:1'}\n")
    assert "r.yaml:5: store.redis: no service" in str(caught.value)


def test_a_fleet_lease_max_is_a_positive_duration_named_where_it_is_wrong() -> None:
    base = ("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
            "connections: [{id: a, api_key: sk-test-key-00001}]}\nroutes:\n"
            "  r: {targets: [p/m]}\n")
    config = load_router_config("r.yaml", text=base + "store: {redis: 'redis://h:6379/0'}\n")
    assert config.store_lease_max_ms == 10_000
    config = load_router_config("r.yaml", text=base + "store: {redis: 'redis://h:6379/0', "
                                                      "lease_max: 3s}\n")
    assert config.store_lease_max_ms == 3_000
    for value, reason in (("0s", "must be longer than 0"), ("soon", "duration")):
        with pytest.raises(ConfigError) as caught:
            load_router_config("r.yaml", text=base + "store:\n  redis: 'redis://h:6379/0'\n"
                                                     f"  lease_max: {value}\n")
        problem = caught.value.problems[0]
        assert (problem.field, problem.line) == ("store.lease_max", 7)
        assert reason in problem.reason

"""Config reload in the sans-IO core: what stays, what goes, what starts fresh (hypothesis)."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import load_router_config
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.model.event_lines import describe
from omniroute_tui.engine.classify import Classification
from omniroute_tui.engine.engine import ResilienceEngine
from omniroute_tui.engine.events import EnabledEvent, Event, ReloadEvent, event_from_dict
from omniroute_tui.engine.kinds import BreakerState, FailureKind
from omniroute_tui.gateway.reload import ConfigReloader
from omniroute_tui.router.core import Router
from omniroute_tui.router.steps import Attempt, Response

START = 1_700_000_000_000
KINDS = (FailureKind.RATE_LIMITED, FailureKind.AUTH_FAILED, FailureKind.MODEL_NOT_FOUND,
         FailureKind.SERVER_ERROR, FailureKind.NETWORK, FailureKind.QUOTA_EXHAUSTED, None)


def base_config() -> dict[str, Any]:
    return {
        "resilience": {"breaker": {"failure_threshold": 3, "degraded_threshold": 2}},
        "providers": {
            "alpha": {"models": ["m1", "m2"], "connections": [
                {"id": f"a{i}", "api_key": f"sk-alpha-key-{i:04d}"} for i in range(4)]},
            "beta": {"models": ["m1"], "connections": [
                {"id": f"b{i}", "api_key": f"sk-beta-key-{i:04d}"} for i in range(3)]},
            "gamma": {"auth": "oauth", "models": ["m1", "m3"], "connections": [
                {"id": "g0", "api_key": "sk-gamma-key-0000"}]},
        },
    }


def with_routes(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["routes"] = {f"r-{name}": {"targets": [f"{name}/{body['models'][0]}"]}
                      for name, body in data["providers"].items()}
    return data


def load(data: dict[str, Any], name: str = "router.yaml") -> Any:
    return load_router_config(name, text=yaml.safe_dump(with_routes(data)), env={})


# -- random config edits ---------------------------------------------------------------------

def _pick(draw: st.DrawFn, items: list[Any]) -> Any:
    return items[draw(st.integers(0, len(items) - 1))]


@st.composite
def edits(draw: st.DrawFn) -> list[tuple[str, ...]]:
    """A list of edits, each an operation and an index (resolved against the config)."""
    ops = st.sampled_from(["add_provider", "remove_provider", "rename_provider",
                           "add_connection", "remove_connection", "rename_connection",
                           "change_key", "add_model", "remove_model", "provider_setting",
                           "global_setting", "reorder"])
    return draw(st.lists(st.tuples(ops, st.integers(0, 99).map(str)), max_size=6))


def apply_edits(data: dict[str, Any], steps: list[tuple[str, ...]]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    providers = data["providers"]
    for serial, (op, seed) in enumerate(steps):
        n = int(seed)
        names = list(providers)
        name = names[n % len(names)]
        body = providers[name]
        conns = body["connections"]
        if op == "add_provider":
            providers[f"p{serial}x{n}"] = {"models": ["m1"], "connections": [
                {"id": "c0", "api_key": f"sk-new-key-{serial:04d}"}]}
        elif op == "remove_provider" and len(providers) > 1:
            del providers[name]
        elif op == "rename_provider" and f"{name}-r" not in providers:
            providers[f"{name}-r"] = providers.pop(name)
        elif op == "add_connection":
            conns.append({"id": f"n{serial}x{n}", "api_key": f"sk-add-key-{serial:04d}{n}"})
        elif op == "remove_connection" and len(conns) > 1:
            del conns[n % len(conns)]
        elif op == "rename_connection":
            conns[n % len(conns)]["id"] += "r"
        elif op == "change_key":
            conns[n % len(conns)]["api_key"] = f"sk-rotated-key-{serial:04d}{n}"
        elif op == "add_model":
            body["models"].append(f"x{serial}")
        elif op == "remove_model" and len(body["models"]) > 1:
            del body["models"][-1]
        elif op == "provider_setting":
            body["resilience"] = {"cooldown": {"base": f"{1 + n % 7}s"},
                                  "breaker": {"reset_timeout": f"{1 + n % 5}s",
                                              "failure_threshold": 1 + n % 6,
                                              "degraded_threshold": 1},
                                  "retry_budget": {"burst": n % 4}}
        elif op == "global_setting":
            data["resilience"] = {"lockout": {"base": f"{1 + n % 3}m"},
                                  "dedup": {"connection_window": f"{n % 9}s"}}
        elif op == "reorder":
            conns.reverse()
    return data


# -- state: made by traffic, read back for comparison ----------------------------------------

def make_state(router: Router, clock: ManualClock, script: list[tuple[int, int, int, int]]
               ) -> None:
    engine = router.engine
    for provider_n, conn_n, kind_n, advance in script:
        names = engine.providers()
        provider = names[provider_n % len(names)]
        spec = engine.spec(provider)
        connection = spec.connections[conn_n % len(spec.connections)]
        model = sorted(router.models[provider])[0]
        admission = engine.admit(provider)
        if admission.allowed:
            engine.record(provider, connection, model, admission,
                          Classification(KINDS[kind_n % len(KINDS)]))
        engine.layers(provider).budget.try_spend()
        clock.advance(advance)


def provider_state(engine: ResilienceEngine, name: str) -> tuple[Any, ...]:
    layers = engine.layers(name)
    now = engine.now()
    return (layers.breaker.snapshot(now),
            {c.connection: c.snapshot() for c in layers.pool.cooldowns},
            sorted(layers.lockouts.snapshots(), key=lambda s: s.key),
            dict(layers.dedup._last_by_connection), layers.dedup._last_network,
            layers.budget.tokens)


def whole_state(router: Router) -> dict[str, tuple[Any, ...]]:
    return {name: provider_state(router.engine, name) for name in router.engine.providers()}


def reload_file(reloader: ConfigReloader, path: Path, text: str) -> Any:
    path.write_text(text)
    return asyncio.run(reloader.reload("tester"))


@settings(max_examples=60, deadline=None)
@given(steps=edits(),
       script=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 6),
                                 st.integers(0, 4000)), max_size=40))
def test_a_reload_keeps_what_is_unchanged_exactly_and_a_bad_file_changes_nothing(
        steps: list[tuple[str, ...]], script: list[tuple[int, int, int, int]]) -> None:
    before_data = base_config()
    after_data = apply_edits(before_data, steps)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "router.yaml"
        path.write_text(yaml.safe_dump(with_routes(before_data)))
        config = load_router_config(path, env={})
        clock = ManualClock(START)
        router = config.build(clock)
        events: list[Event] = []
        router.engine.bus.subscribe(events.append)
        reloader = ConfigReloader(router, config, on_swap=lambda c: None)
        make_state(router, clock, script)
        old_specs = {n: router.engine.spec(n) for n in router.engine.providers()}
        old_models = dict(router.models)
        old_layers = {n: router.engine.layers(n) for n in router.engine.providers()}
        old = whole_state(router)
        old_data_text = yaml.safe_dump(with_routes(after_data))
        events.clear()

        result = reload_file(reloader, path, old_data_text)

        assert result.ok, result.problems
        new_config = load_router_config(path, env={})
        new_specs = {s.name: s for s in new_config.provider_specs()}
        assert router.engine.providers() == tuple(new_specs)
        new = whole_state(router)
        reloads = [e for e in events if isinstance(e, ReloadEvent)]
        assert len(reloads) == 1
        event = reloads[0]
        assert event.version == hashlib.sha256(old_data_text.encode()).hexdigest()[:12]
        assert set(event.providers_added) == set(new_specs) - set(old_specs)
        assert set(event.providers_removed) == set(old_specs) - set(new_specs)
        for name, spec in new_specs.items():
            if name not in old_specs:  # added: fresh
                breaker, conns, lockouts, dedup, network, tokens = new[name]
                assert breaker.state is BreakerState.CLOSED and breaker.failures == 0
                assert all(c.level == 0 and c.cooling_until == 0 and not c.disabled
                           for c in conns.values())
                assert lockouts == [] and dedup == {} and network is None
                continue
            if spec == old_specs[name] and router.models[name] == old_models[name]:
                # unchanged: the very same objects, every value as it was
                assert router.engine.layers(name) is old_layers[name]
                assert new[name] == old[name]
                assert name not in event.providers_changed
                continue
            assert name in event.providers_changed
            breaker, conns, lockouts, dedup, network, tokens = new[name]
            assert breaker == old[name][0]  # state, counters, deadlines: all kept
            for conn, snapshot in conns.items():
                was = old[name][1].get(conn)
                if was is None:
                    assert snapshot.level == 0 and snapshot.cooling_until == 0
                    assert f"{name}/{conn}" in event.connections_added
                    continue
                assert snapshot.cooling_until == was.cooling_until  # never shortened
                assert snapshot.level == was.level
                rekeyed = (old_specs[name].credential_of().get(conn)
                           != spec.credential_of().get(conn))
                if rekeyed and was.disabled and was.disabled_reason == "auth_failed":
                    assert not snapshot.disabled  # a new key is a new credential
                else:
                    assert (snapshot.disabled, snapshot.disabled_reason) == (
                        was.disabled, was.disabled_reason)
            gone = set(old[name][1]) - set(conns)
            assert {f"{name}/{c}" for c in gone} == {
                c for c in event.connections_removed if c.startswith(f"{name}/")}
            kept_locks = [s for s in old[name][2] if s.connection in conns
                          and s.model in router.models[name]]
            assert lockouts == kept_locks
            assert dedup == {c: t for c, t in old[name][3].items() if c in conns}
            assert network == old[name][4]
            assert tokens == min(old[name][5], float(spec.settings.retry_budget.burst))

        # a file with problems: refused whole, nothing changes, nothing is announced
        before_bad = whole_state(router)
        version = reloader.status.version
        layers = {n: router.engine.layers(n) for n in router.engine.providers()}
        events.clear()
        broken = with_routes(after_data)
        broken["routes"]["r-bad"] = {"targets": ["nowhere/m1"]}
        first = next(iter(broken["providers"].values()))
        first["connections"].append({"id": "bad id!"})
        bad = reload_file(reloader, path, yaml.safe_dump(broken))
        assert not bad.ok and len(bad.problems) == 2
        assert whole_state(router) == before_bad
        assert {n: router.engine.layers(n) for n in router.engine.providers()} == layers
        assert reloader.status.version == version and reloader.status.failures == 1
        assert not any(isinstance(e, ReloadEvent) for e in events)
        # and the router still routes every route it has
        for route in router.routes:
            router.start(f"after-{route}", route).next_step()


def router_for(data: dict[str, Any], clock: ManualClock) -> tuple[Router, list[Event]]:
    router = load(data).build(clock)
    events: list[Event] = []
    router.engine.bus.subscribe(events.append)
    return router, events


def test_settings_apply_from_the_next_transition_and_never_shorten_a_deadline() -> None:
    clock = ManualClock(START)
    data = base_config()
    data["providers"]["alpha"]["resilience"] = {
        "breaker": {"reset_timeout": "30s", "failure_threshold": 1, "degraded_threshold": 1},
        "cooldown": {"base": "20s"}}
    router, _ = router_for(data, clock)
    engine = router.engine
    engine.record("alpha", "a0", "m1", engine.admit("alpha"),
                  Classification(FailureKind.SERVER_ERROR))
    opened = engine.breaker_snapshot("alpha")
    assert opened.state is BreakerState.OPEN and opened.retry_after_ms == 30_000
    cooling = engine.connection_snapshot("alpha", "a0").cooling_until
    assert cooling == START + 20_000

    data["providers"]["alpha"]["resilience"] = {
        "breaker": {"reset_timeout": "1s", "failure_threshold": 1, "degraded_threshold": 1},
        "cooldown": {"base": "1s"}}
    summary = load(data).reconfigure(router)
    assert summary.providers_changed == ("alpha",)
    clock.advance(2_000)  # past the new reset, well before the old one
    assert engine.breaker_snapshot("alpha").state is BreakerState.OPEN
    assert engine.breaker_snapshot("alpha").retry_after_ms == 28_000
    assert engine.connection_snapshot("alpha", "a0").cooling_until == cooling
    clock.advance(28_000)  # the old deadline: HALF_OPEN; the probe fails: the new window
    admission = engine.admit("alpha")
    assert admission.probe
    engine.record("alpha", "a1", "m1", admission, Classification(FailureKind.SERVER_ERROR))
    assert engine.breaker_snapshot("alpha").retry_after_ms == 1_000
    assert engine.connection_snapshot("alpha", "a1").cooling_until == clock.now_ms() + 1_000


def test_a_new_key_loses_an_auth_disable_and_keeps_its_cooldown() -> None:
    clock = ManualClock(START)
    data = base_config()
    router, events = router_for(data, clock)
    engine = router.engine
    engine.record("beta", "b0", "m1", engine.admit("beta"),
                  Classification(FailureKind.AUTH_FAILED))
    engine.record("beta", "b1", "m1", engine.admit("beta"),
                  Classification(FailureKind.RATE_LIMITED))
    engine.record("beta", "b2", "m1", engine.admit("beta"),
                  Classification(FailureKind.AUTH_FAILED))
    engine.set_enabled("beta", "b2", False, actor="ops")  # an operator's own disable
    cooling = engine.connection_snapshot("beta", "b1")
    assert engine.connection_snapshot("beta", "b0").disabled
    events.clear()
    for conn in data["providers"]["beta"]["connections"]:
        conn["api_key"] += "-rotated"
    load(data).reconfigure(router)
    assert not engine.connection_snapshot("beta", "b0").disabled
    assert engine.connection_snapshot("beta", "b1") == cooling
    # b2 was disabled by the auth failure first: its reason is auth_failed, so it too
    assert not engine.connection_snapshot("beta", "b2").disabled
    enabled = [e for e in events if isinstance(e, EnabledEvent)]
    assert [(e.connection, e.reason) for e in enabled] == [("b0", "new key"),
                                                            ("b2", "new key")]
    # the same key again: nothing to re-enable
    engine.record("beta", "b0", "m1", engine.admit("beta"),
                  Classification(FailureKind.AUTH_FAILED))
    load(data).reconfigure(router)
    assert engine.connection_snapshot("beta", "b0").disabled


def test_requests_in_flight_finish_on_the_plan_they_started_with() -> None:
    clock = ManualClock(START)
    data = base_config()
    router, events = router_for(data, clock)
    on_gone_conn = router.start("q1", "r-alpha")
    first = on_gone_conn.next_step()
    assert isinstance(first, Attempt) and first.connection == "a0"
    on_gone_provider = router.start("q2", "r-gamma")
    second = on_gone_provider.next_step()
    assert isinstance(second, Attempt) and second.provider == "gamma"

    edited = copy.deepcopy(data)
    del edited["providers"]["gamma"]
    edited["providers"]["alpha"]["connections"] = edited["providers"]["alpha"]["connections"][1:]
    summary = load(edited).reconfigure(router)
    assert summary.providers_removed == ("gamma",)
    assert summary.connections_removed == ("alpha/a0",)
    events.clear()
    clock.advance(100)
    # both answer on their own plans; what the removed parts saw is announced nowhere
    on_gone_conn.record(500, Classification(FailureKind.SERVER_ERROR))
    retry = on_gone_conn.next_step()
    assert isinstance(retry, Response) or (isinstance(retry, Attempt)
                                           and retry.connection != "a0")
    on_gone_provider.record(401, Classification(FailureKind.AUTH_FAILED))
    assert not any(getattr(e, "connection", None) == "a0" or getattr(e, "provider", "") ==
                   "gamma" for e in events if e.TYPE in ("cooldown", "breaker", "disabled"))
    with pytest.raises(KeyError):
        router.engine.spec("gamma")
    # new requests take the new plan: [a1, a2], its rotation going on from its count (one
    # request started on alpha before the reload)
    step = router.start("q3", "r-alpha").next_step()
    assert isinstance(step, Attempt) and step.connection == "a2"


def test_an_added_provider_gets_the_fleets_probe_gate() -> None:
    clock = ManualClock(START)
    data = base_config()
    router, _ = router_for(data, clock)
    asked: list[str] = []

    def gate(provider: str, now: int) -> bool:
        asked.append(provider)
        return False

    router.engine.set_probe_gate(gate)
    data["providers"]["delta"] = {"models": ["m1"], "resilience": {"breaker": {
        "failure_threshold": 1, "degraded_threshold": 1, "reset_timeout": "1s"}},
        "connections": [{"id": "d0", "api_key": "sk-delta-key-0000"}]}
    load(data).reconfigure(router)
    engine = router.engine
    engine.record("delta", "d0", "m1", engine.admit("delta"),
                  Classification(FailureKind.SERVER_ERROR))
    clock.advance(1_000)
    assert not engine.admit("delta").allowed and asked == ["delta"]


def test_the_reload_event_round_trips_and_shows_in_the_console() -> None:
    event = ReloadEvent(5, "0123456789ab", ("delta",), ("gamma",), ("alpha",),
                        ("alpha/a9",), ("alpha/a0",))
    assert event_from_dict(event.to_dict()) == event
    assert event.to_json() == (
        '{"t":5,"type":"reload","version":"0123456789ab","providers_added":["delta"],'
        '"providers_removed":["gamma"],"providers_changed":["alpha"],'
        '"connections_added":["alpha/a9"],"connections_removed":["alpha/a0"]}')
    config = load(base_config())
    model = ConsoleModel(config.providers, lambda: 10)
    assert ("gamma", "g0") in model.connections
    model.on_event(event)
    assert "gamma" not in model.providers and ("gamma", "g0") not in model.connections
    assert ("alpha", "a0") not in model.connections and ("alpha", "a1") in model.connections
    assert describe(event) == ("reload: config 0123456789ab, +delta -gamma ~alpha "
                               "(+1/-1 connections)")
    assert model.events[-1][1] == "reload"


def test_a_reader_that_fails_unexpectedly_refuses_the_reload_and_keeps_serving() -> None:
    clock = ManualClock(START)
    config = load(base_config())
    router = config.build(clock)

    def broken(path: str) -> Any:
        raise RuntimeError("disk on fire")

    reloader = ConfigReloader(router, config, on_swap=lambda c: None, load=broken)
    result = asyncio.run(reloader.reload("tester"))
    assert not result.ok and result.version == config.version
    assert [str(p) for p in result.problems] == [
        "router.yaml: (file): could not be read: disk on fire"]
    assert reloader.status.failures == 1 and reloader.status.last_reload_ok is False
    assert router.engine.providers() == ("alpha", "beta", "gamma")


# -- what a reload refuses, and what it says (docs/design.md §13) ------------------------

def simple_config(routes: dict[str, Any] | None, **extra: Any) -> str:
    data: dict[str, Any] = {"providers": {"p": {
        "base_url": "http://127.0.0.1:9/v1", "models": ["m", "n"],
        "connections": [{"id": "k", "api_key": "sk-test-key-000001"}]}}}
    if routes is not None:
        data["routes"] = routes
    data.update(extra)
    return yaml.safe_dump(data)


def reloader_on(path: Path, text: str) -> ConfigReloader:
    path.write_text(text)
    config = load_router_config(path, env={})
    return ConfigReloader(config.build(ManualClock(START)), config, on_swap=lambda c: None)


def test_a_file_that_drops_a_section_the_running_config_uses_is_refused(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    reloader = reloader_on(path, simple_config({"chat": {"targets": ["p/m"]}},
                                               resilience={"jitter": 0.1}))
    result = reload_file(reloader, path, simple_config(None))
    assert not result.ok
    assert [p.field for p in result.problems] == ["routes", "resilience"]
    assert "where the running config has 1 entry" in str(result.problems[0])
    assert "write `routes: {}`" in str(result.problems[0])
    assert set(reloader.router.routes) >= {"chat"}  # the running config stays
    # an explicit empty section says what it means: taken
    result = reload_file(reloader, path, simple_config({}, resilience={}))
    assert result.ok and result.routes.removed == ("chat",)


def test_the_answer_and_the_log_name_the_routes_that_changed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "router.yaml"
    reloader = reloader_on(path, simple_config({"a": {"targets": ["p/m"]},
                                                "b": {"targets": ["p/m"]}}))
    with caplog.at_level(logging.INFO, logger="omniroute.reload"):
        result = reload_file(reloader, path, simple_config({
            "a": {"targets": ["p/m", "p/n"]}, "c": {"targets": ["p/n"]}}))
    assert result.ok
    summary = result.to_dict()["summary"]
    assert (summary["routes_added"], summary["routes_removed"], summary["routes_changed"]) == (
        ["c"], ["b"], ["a"])
    assert "routes +c -b ~a" in caplog.text


def test_a_file_that_changes_while_it_is_read_is_read_again_or_refused(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    reloader = reloader_on(path, simple_config({"a": {"targets": ["p/m"]}}))
    writes = iter(range(100))

    def writer_racing(name: str) -> Any:
        config = load_router_config(name, env={})
        with open(name, "a") as out:  # a deploy appending while the file is read
            out.write(f"# {next(writes)}\n")
        return config

    reloader._load = writer_racing
    result = asyncio.run(reloader.reload("tester"))
    assert not result.ok
    assert "changed while it was read, 3 times" in str(result.problems[0])
    once = iter([True])

    def settles(name: str) -> Any:
        config = load_router_config(name, env={})
        if next(once, False):
            with open(name, "a") as out:
                out.write("# the writer's last line\n")
        return config

    reloader._load = settles
    path.write_text(simple_config({"a": {"targets": ["p/n"]}}))
    result = asyncio.run(reloader.reload("tester"))
    assert result.ok and result.routes.changed == ("a",)

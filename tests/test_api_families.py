"""Provider families in the config, which endpoint each serves, and the router's
`not_served` skip (docs/design.md §13, §14)."""

from __future__ import annotations

import pytest

from omniroute_tui.apis import ApiFamily, Endpoint, Translation, serving
from omniroute_tui.apis.families import Serving
from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.engine import FailureKind, SkipReason
from omniroute_tui.router import Target

from .helpers import OK, fail, make_engine, make_router, play

MIXED = """\
providers:
  openai:
    base_url: https://api.openai.com/v1
    models: [gpt-4o]
    embedding_models: [text-embedding-3-small]
    connections: [{id: k1, api_key: sk-openai-0001}]
  azure:
    api: azure
    base_url: https://example.openai.azure.com
    api_version: 2024-10-21
    deployments: {gpt-4o: prod-gpt4o}
    models: [gpt-4o, gpt-4o-mini]
    connections: [{id: k1, api_key: azure-key-0001}]
  anthropic:
    api: anthropic
    base_url: https://api.anthropic.com
    models: [claude-sonnet-4-5]
    connections: [{id: k1, api_key: sk-ant-0001}]
  gemini:
    api: gemini
    base_url: https://generativelanguage.googleapis.com/v1beta/openai
    models: [gemini-2.0-flash]
    embedding_models: [text-embedding-004]
    connections: [{id: k1, api_key: gm-key-0001}]
routes:
  chat: {targets: [openai/gpt-4o, anthropic/claude-sonnet-4-5]}
  embed: {targets: [openai/text-embedding-3-small, gemini/text-embedding-004]}
"""


def load(text: str):  # type: ignore[no-untyped-def]
    return load_router_config("router.yaml", text=text, env={})


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return [f"{p.field}: {p.reason}" for p in info.value.problems]


def test_every_family_loads_with_its_own_settings() -> None:
    config = load(MIXED)
    providers = config.providers
    assert providers["openai"].api.family is ApiFamily.OPENAI  # the default
    assert providers["azure"].api.family is ApiFamily.AZURE
    assert providers["azure"].api.api_version == "2024-10-21"  # YAML's date, read back
    assert providers["azure"].api.deployment("gpt-4o") == "prod-gpt4o"
    assert providers["azure"].api.deployment("gpt-4o-mini") == "gpt-4o-mini"
    assert providers["anthropic"].api.anthropic_version == "2023-06-01"
    assert providers["openai"].all_models == ("gpt-4o", "text-embedding-3-small")
    assert providers["openai"].embedding_models == ("text-embedding-3-small",)
    assert config.routes["embed"].targets[1] == Target("gemini", "text-embedding-004")


def test_a_provider_of_embedding_models_only_needs_no_models() -> None:
    text = MIXED.replace("    models: [gemini-2.0-flash]\n", "")
    assert load(text).providers["gemini"].models == ()


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("api: anthropic", "api: bedrock",
     "providers.anthropic.api: expected one of openai, azure, anthropic, gemini, got 'bedrock'"),
    ("api: anthropic", "api: [anthropic]", "providers.anthropic.api: expected one of"),
    ("    models: [claude-sonnet-4-5]\n",
     "    models: [claude-sonnet-4-5]\n    api_version: 2024-10-21\n",
     "providers.anthropic.api_version: only an `api: azure` provider has api_version; "
     "this one is `api: anthropic`"),
    ("    models: [gemini-2.0-flash]\n",
     "    models: [gemini-2.0-flash]\n    anthropic_version: 2023-06-01\n",
     "providers.gemini.anthropic_version: only an `api: anthropic` provider has"),
    ("api_version: 2024-10-21", "api_version: latest",
     "providers.azure.api_version: expected a version such as 2024-10-21, got 'latest'"),
    ("{gpt-4o: prod-gpt4o}", "{gpt-4o: 'prod gpt4o/../x'}",
     "providers.azure.deployments.gpt-4o: a deployment name is letters, digits"),
    ("{gpt-4o: prod-gpt4o}", "[prod-gpt4o]", "providers.azure.deployments: expected a mapping"),
    ("embedding_models: [text-embedding-004]", "embedding_models: [gemini-2.0-flash]",
     "providers.gemini.embedding_models[0]: model 'gemini-2.0-flash' is in models too"),
    ("embedding_models: [text-embedding-3-small]", "embedding_models: []",
     "providers.openai.embedding_models: expected a non-empty list of model names"),
])
def test_a_bad_family_setting_is_refused_with_its_field(old: str, new: str,
                                                         expected: str) -> None:
    assert old in MIXED
    found = problems(MIXED.replace(old, new, 1))
    assert any(expected in p for p in found), found


def test_a_preview_version_and_a_date_are_both_taken() -> None:
    config = load(MIXED.replace("api_version: 2024-10-21", "api_version: 2025-04-01-preview"))
    assert config.providers["azure"].api.api_version == "2025-04-01-preview"


def test_a_flood_of_deployments_is_refused_before_it_is_built() -> None:
    flood = "{" + ", ".join(f"m{i}: d{i}" for i in range(1001)) + "}"
    found = problems(MIXED.replace("{gpt-4o: prod-gpt4o}", flood))
    assert any("deployments" in p and "at most 1,000" in p for p in found), found


@pytest.mark.parametrize(("family", "endpoint", "expected"), [
    (ApiFamily.OPENAI, Endpoint.CHAT, Serving(Endpoint.CHAT)),
    (ApiFamily.OPENAI, Endpoint.RESPONSES, Serving(Endpoint.RESPONSES)),
    (ApiFamily.OPENAI, Endpoint.MESSAGES, Serving(Endpoint.CHAT, Translation.MESSAGES_TO_CHAT)),
    (ApiFamily.OPENAI, Endpoint.COUNT_TOKENS, None),
    (ApiFamily.AZURE, Endpoint.EMBEDDINGS, Serving(Endpoint.EMBEDDINGS)),
    (ApiFamily.AZURE, Endpoint.RESPONSES, None),
    (ApiFamily.ANTHROPIC, Endpoint.CHAT, Serving(Endpoint.MESSAGES,
                                                 Translation.CHAT_TO_MESSAGES)),
    (ApiFamily.ANTHROPIC, Endpoint.COUNT_TOKENS, Serving(Endpoint.COUNT_TOKENS)),
    (ApiFamily.ANTHROPIC, Endpoint.EMBEDDINGS, None),
    (ApiFamily.GEMINI, Endpoint.COMPLETIONS, None),
    (ApiFamily.GEMINI, Endpoint.MESSAGES, Serving(Endpoint.CHAT, Translation.MESSAGES_TO_CHAT)),
])
def test_which_family_serves_which_endpoint(family: ApiFamily, endpoint: Endpoint,
                                            expected: Serving | None) -> None:
    assert serving(family, endpoint) == expected


def test_a_target_that_does_not_serve_is_skipped_before_its_breaker() -> None:
    engine, clock, _ = make_engine()
    router = make_router(engine)
    routing = router.start("r1", "r", serves=lambda target: target.provider != "alpha")
    attempts = []
    play(routing, clock, lambda a: attempts.append(a) or (10, 200, OK, None))
    assert [a.provider for a in attempts] == ["beta"]
    assert [(s.target, s.reason) for s in routing.skips] == [("alpha/m", SkipReason.NOT_SERVED)]


def test_not_served_has_no_part_in_the_429_of_a_cooling_route() -> None:
    """The route's only serving target cools: a 429 with its retry, as without the
    target that does not serve (which says nothing of when to retry)."""
    engine, clock, _ = make_engine()
    router = make_router(engine)
    serves_beta = lambda target: target.provider == "beta"  # noqa: E731
    play(router.start("r1", "r", serves=serves_beta), clock,
         lambda a: (10, 429, fail(FailureKind.RATE_LIMITED, 30_000), None))
    routing = router.start("r2", "r", serves=serves_beta)
    play(routing, clock, lambda a: (10, 200, OK, None))
    assert routing.response is not None
    assert routing.response.status == 429
    assert [s.reason for s in routing.skips] == [SkipReason.NOT_SERVED, SkipReason.ALL_COOLING]


def test_a_provider_with_no_models_of_either_kind_is_refused() -> None:
    text = MIXED.replace("    models: [claude-sonnet-4-5]\n", "").replace(
        "anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini")
    assert any("providers.anthropic.models: expected a non-empty list" in p
               for p in problems(text))

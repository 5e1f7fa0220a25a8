"""One client request as the driver carries it to every target of its route: its
endpoint, its body, and how each target's family serves it, natively or translated
(docs/design.md §13, §14)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..apis import Endpoint, Serving, Translation, serving
from ..config.router_config import ProviderConfig
from ..router.routes import Route, Target
from ..translate import Untranslatable
from .translated import REQUESTS

__all__ = ["ClientRequest", "NotServed"]


@dataclass(frozen=True)
class NotServed:
    """Why no target of a route serves a request: a sentence, and the field it names
    (None: the endpoint itself)."""

    reason: str
    param: str | None = None


@dataclass
class ClientRequest:
    """`headers`: the client's headers a native upstream of its own API is given
    (Anthropic's version and betas)."""

    endpoint: Endpoint
    body: dict[str, Any]
    stream: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    #: each translation's request body, made once (or why it cannot be)
    _translated: dict[Translation, dict[str, Any] | Untranslatable] = field(
        default_factory=dict)

    def serving(self, provider: ProviderConfig, model: str) -> Serving | None:
        """How `provider` serves this request with `model`; None: it does not (its family
        lacks the endpoint, the model is of the other kind, or the body cannot be
        translated)."""
        if (model in provider.embedding_models) != self.endpoint.embeds:
            return None
        how = serving(provider.api.family, self.endpoint)
        if how is None or how.translation is None:
            return how
        return None if isinstance(self.translated(how.translation), Untranslatable) else how

    def translated(self, translation: Translation) -> dict[str, Any] | Untranslatable:
        known = self._translated.get(translation)
        if known is None:
            try:
                known = REQUESTS[translation](self.body)
            except Untranslatable as exc:
                known = exc
            self._translated[translation] = known
        return known

    def upstream_body(self, how: Serving, model: str) -> dict[str, Any]:
        """The body an attempt sends: the client's, or its translation, with the target's
        model."""
        if how.translation is None:
            return dict(self.body, model=model)
        body = self.translated(how.translation)
        assert not isinstance(body, Untranslatable)  # `serving` said it is served
        return dict(body, model=model)

    def why_not(self, route: Route, providers: Mapping[str, ProviderConfig]
                ) -> NotServed | None:
        """None if a target of `route` serves this request; else why none does, said
        before any upstream call (a 400)."""
        untranslatable: Untranslatable | None = None
        for target in route.targets:
            provider = providers.get(target.provider)
            if provider is None or self.serving(provider, target.model) is not None:
                return None
            how = serving(provider.api.family, self.endpoint)
            if how is not None and how.translation is not None and (
                    target.model in provider.embedding_models) == self.endpoint.embeds:
                found = self.translated(how.translation)
                if isinstance(found, Untranslatable):
                    untranslatable = found
        if untranslatable is not None:
            return NotServed(f"{untranslatable.message}: no target of {route.name!r} "
                             f"takes `{untranslatable.param}`", untranslatable.param)
        names = ", ".join(str(t) for t in route.targets[:5])
        kind = "an embedding model" if self.endpoint.embeds else "a model of text"
        return NotServed(f"no target of {route.name!r} serves {self.endpoint.path} "
                         f"({names}{', ...' if len(route.targets) > 5 else ''}): it needs "
                         f"{kind} of a provider whose API has it")

    def serves(self, providers: Mapping[str, ProviderConfig], target: Target) -> bool:
        """The router's `serves`: whether `target` can take this request."""
        provider = providers.get(target.provider)
        return provider is None or self.serving(provider, target.model) is not None

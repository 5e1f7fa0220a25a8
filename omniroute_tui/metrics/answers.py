"""What only the gateway sees of an upstream's answer: a stream's time to its first bytes,
and the tokens an answer's `usage` says it took (docs/metrics.md). The request path adds
one count or one observation; the families are built at the scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ..drivers.usage import Usage
from ..router.core import Router
from .buckets import FIRST_TOKEN_BUCKETS_MS, Buckets
from .labels import OTHER, LabelBounds

__all__ = ["TOKEN_TYPES", "AnswerCounters"]

#: the `type` label of the token counter
TOKEN_TYPES = ("prompt", "completion")


class AnswerCounters:
    """Time to first token per provider and model, tokens per provider, route and model;
    labels bounded as the traffic's are (`LabelBounds`), every series a route's target
    could take there from 0."""

    def __init__(self, router: Router) -> None:
        self._labels = labels = LabelBounds(router)
        #: (provider, model label) -> a stream's time to its first bytes, in ms
        self.first_token: dict[tuple[str, str], Buckets] = {
            declared: Buckets(FIRST_TOKEN_BUCKETS_MS, 0.001) for declared in labels.declared}
        #: (provider, route label, model label) -> [prompt, completion] tokens
        self.tokens: dict[tuple[str, str, str], list[int]] = {}
        for route in router.routes.values():
            for target in route.targets:
                self.tokens[(target.provider, route.name, target.model)] = [0, 0]
        for provider, model in labels.declared:  # asked for by name: the route is it
            self.tokens[(provider, f"{provider}/{model}", model)] = [0, 0]

    def _model(self, provider: str, model: str) -> str:
        return self._labels.models.get((provider, model)) or self._labels.model(provider, model)

    def streamed(self, provider: str, model: str, first_bytes_ms: int) -> None:
        """A stream answered: its first bytes came `first_bytes_ms` after the attempt. A
        histogram per model the config declares; the learned ones share `other`."""
        buckets = self.first_token.get((provider, model))
        if buckets is None:
            buckets = self.first_token.setdefault((provider, OTHER),
                                                  Buckets(FIRST_TOKEN_BUCKETS_MS, 0.001))
        buckets.observe(max(0, first_bytes_ms))

    def usage(self, provider: str, route: str, model: str, usage: Usage) -> None:
        """An answer of `provider`'s `model`, asked for as `route`, took `usage`."""
        labels = self._labels
        key = (provider, labels.routes.get(route) or labels.route(route),
               self._model(provider, model))
        counts = self.tokens.get(key)
        if counts is None:
            counts = self.tokens[key] = [0, 0]
        counts[0] += usage.prompt_tokens
        counts[1] += usage.completion_tokens

    def families(self) -> Iterator[Metric]:
        first = HistogramMetricFamily(
            "omniroute_upstream_time_to_first_token_seconds",
            "Time from sending an attempt to a streamed answer's first bytes.",
            labels=("provider", "model"))
        for (provider, model), buckets in self.first_token.items():
            first.add_metric((provider, model), list(buckets.cumulative()),
                             buckets.sum / 1000)
        yield first
        tokens = CounterMetricFamily(
            "omniroute_upstream_tokens", "Tokens the answers' usage says they took, by type.",
            labels=("provider", "route", "model", "type"))
        for (provider, route, model), counts in self.tokens.items():
            for kind, count in zip(TOKEN_TYPES, counts, strict=True):
                tokens.add_metric((provider, route, model, kind), count)
        yield tokens

"""Label values a scrape may carry, bounded by the config (docs/design.md §13).

Every label value is a name the config declares (a provider, a connection, a route, a
model) or one of the engine's words (a state, a kind, a reason). The one set that traffic
can grow, models of providers that declare none, is capped at the router's own cap on
learned names; past it, a model is counted as `other`. A request's content or a key never
becomes a label: no event carries either.
"""

from __future__ import annotations

from ..router.core import MAX_LEARNED_MODELS, Router

__all__ = ["OTHER", "LabelBounds", "status_class"]

#: the label value of every model (or route) past the cap
OTHER = "other"

_STATUS_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}


def status_class(status: int) -> str:
    """`2xx`, `4xx`, `5xx` (or `1xx`, `3xx`) for an answer's status; anything out of
    range is a server error of ours."""
    return _STATUS_CLASSES.get(status // 100, "5xx")


class LabelBounds:
    """The model and route label values of one router: declared names as they are, learned
    ones up to `MAX_LEARNED_MODELS`, then `other`."""

    def __init__(self, router: Router, cap: int = MAX_LEARNED_MODELS) -> None:
        self._cap = cap
        #: (provider, model) -> its label, for every name admitted so far
        self.models: dict[tuple[str, str], str] = {}
        for provider, models in router.models.items():
            for model in models:
                self.models[(provider, model)] = model
        for route in router.routes.values():
            for target in route.targets:
                self.models[(target.provider, target.model)] = target.model
        #: the names the config declares, each a series even before it is counted
        self.declared = tuple(self.models)
        self._learned = 0
        #: route name -> its label: the config's routes and every declared provider/model
        self.routes: dict[str, str] = {name: name for name in router.routes}
        for provider, model in self.models:
            self.routes[f"{provider}/{model}"] = f"{provider}/{model}"
        self._learned_routes = 0

    def model(self, provider: str, model: str) -> str:
        """The label of `model` on `provider` (the caller has looked in `models` first:
        this is the path of a name not seen before)."""
        label = self.models.get((provider, model))
        if label is not None:
            return label
        if self._learned >= self._cap:
            return OTHER  # not remembered: the dictionary stays bounded too
        self._learned += 1
        self.models[(provider, model)] = model
        return model

    def route(self, name: str) -> str:
        """The label of a route a request named (a route, or a learned provider/model)."""
        label = self.routes.get(name)
        if label is not None:
            return label
        if self._learned_routes >= self._cap:
            return OTHER
        self._learned_routes += 1
        self.routes[name] = name
        return name

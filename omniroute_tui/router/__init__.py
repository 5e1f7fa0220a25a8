"""The sans-IO routing core: which target and connection to try next, and the answer."""

from .core import RequestRouting, Router, UnknownRoute
from .routes import DEFAULT_STRATEGY, Route, Strategy, Target
from .steps import Attempt, AttemptRecord, Response, Skip, Step, Wait

__all__ = [
    "DEFAULT_STRATEGY",
    "Attempt",
    "AttemptRecord",
    "RequestRouting",
    "Response",
    "Route",
    "Router",
    "Skip",
    "Step",
    "Strategy",
    "Target",
    "UnknownRoute",
    "Wait",
]

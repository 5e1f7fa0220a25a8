"""Prometheus metrics of a router (docs/design.md §13): engine state read at scrape time,
traffic counted from the event bus. Sans-IO: the caller serves the bytes."""

from prometheus_client import CONTENT_TYPE_LATEST

from .answers import AnswerCounters
from .labels import OTHER
from .registry import build_registry, exposition

__all__ = ["CONTENT_TYPE_LATEST", "OTHER", "AnswerCounters", "build_registry", "exposition"]

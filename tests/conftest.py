"""Fixtures every test module may ask for by name."""

from .redis_helpers import prefix  # noqa: F401  # a key prefix of the test's own on the fleet's Redis

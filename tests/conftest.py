"""Fixtures every test module may ask for by name: `prefix` (a key prefix of the test's
own on the fleet's Redis) and `wheel` (the project's wheel, built once a session)."""

from .redis_helpers import prefix  # noqa: F401
from .wheel_helpers import wheel  # noqa: F401

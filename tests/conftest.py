"""Fixtures every test module may ask for by name: `prefix` (a key prefix of the test's
own on the fleet's Redis) and `wheel` (the project's wheel, built once a session); and,
for every test, the logging setup as it was before it."""

import logging
from collections.abc import Iterator

import pytest

from .redis_helpers import prefix  # noqa: F401
from .wheel_helpers import wheel  # noqa: F401


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs a command's `main` in this process sets the root logger up to
    write to the stderr of that test (pytest's capture, closed after it): the next test in
    the worker would then log into a closed stream ("--- Logging error ---"). Whatever a
    test does to the root logger and the libraries' loggers is undone after it."""
    root = logging.getLogger()
    handlers = [h for h in root.handlers if not _pytests(h)]
    level = root.level
    libraries = {name: (logger.handlers[:], logger.propagate)
                 for name, logger in logging.Logger.manager.loggerDict.items()
                 if isinstance(logger, logging.Logger)}
    yield
    # pytest's own capture handlers come and go with each phase: those of this one stay
    root.handlers[:] = handlers + [h for h in root.handlers if _pytests(h)]
    root.setLevel(level)
    for name, (kept, propagate) in libraries.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = kept
        logger.propagate = propagate


def _pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")

"""Loading and validating config files; every error names the file, line and field."""

from .durations import format_ms, parse_duration_ms, parse_rate_per_s
from .problems import ConfigError, Problem
from .router_config import (
    ConnectionConfig,
    MetricsAccess,
    ProviderConfig,
    RouterConfig,
    load_router_config,
)
from .secrets import Secret, mask_secret
from .yaml_source import Source, load_source

__all__ = [
    "ConfigError",
    "ConnectionConfig",
    "MetricsAccess",
    "Problem",
    "ProviderConfig",
    "RouterConfig",
    "Secret",
    "Source",
    "format_ms",
    "load_router_config",
    "load_source",
    "mask_secret",
    "parse_duration_ms",
    "parse_rate_per_s",
]

"""OmniRoute Console: an LLM-request router with a three-layer resilience engine."""

__version__ = "0.1.0"

"""OpenTelemetry traces of the gateway's requests (docs/tracing.md): off unless the
standard `OTEL_*` variables ask for them."""

from __future__ import annotations

from collections.abc import Mapping

from .. import __version__
from ..engine.engine import ResilienceEngine
from .exporter import ExportSettings, SettingsError, SpanExporter
from .otlp_wire import clean_attributes
from .request_spans import MAX_OPEN_TRACES, RequestTracing

__all__ = ["MAX_OPEN_TRACES", "RequestTracing", "SettingsError", "tracing_from_env",
           "tracing_wanted"]

#: the instrumentation scope the spans are sent under
SCOPE = ("omniroute_tui", __version__)


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the variables turn tracing on: an OTLP endpoint is set
    (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`), and neither
    `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns it off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "otlp")
                 .split(",")}
    return "none" not in exporters and bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())


def tracing_from_env(environ: Mapping[str, str], engine: ResilienceEngine, *,
                     replica: str | None = None) -> RequestTracing | None:
    """Tracing as the variables configure it, or None (off; `tracing_wanted`). The
    exporter's settings come from `OTEL_EXPORTER_OTLP_*` and `OTEL_BSP_*`; the sampler
    (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), the service's name and the
    resource's attributes (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) are read by
    the OpenTelemetry SDK, as in any instrumented service. SettingsError names a variable
    that cannot be used."""
    if not tracing_wanted(environ):
        return None
    settings = ExportSettings.from_env(environ)
    # the SDK reads the sampler and the resource from the process's environment
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    given: dict[str, str] = {"service.version": __version__}
    if not environ.get("OTEL_SERVICE_NAME"):
        given["service.name"] = "omniroute-gateway"
    if replica is not None:
        given["service.instance.id"] = replica
    resource = clean_attributes(Resource.create(given).attributes)
    chosen = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    sampler = (None if chosen in ("", "parentbased_always_on")
               else TracerProvider(shutdown_on_exit=False).sampler)
    propagators = {name.strip().lower() for name in environ.get(
        "OTEL_PROPAGATORS", "tracecontext,baggage").split(",")}
    w3c = "tracecontext" in propagators and propagators <= {"tracecontext", "baggage"}
    return RequestTracing(engine, SpanExporter(settings, resource, SCOPE), sampler, w3c=w3c)

"""The management API against its own OpenAPI document, with schemathesis: generated
paths, headers and bodies never get a 500, and every answer is one the document allows."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine import BreakerAdmission, Classification, FailureKind
from omniroute_tui.gateway import Gateway

from .gateway_helpers import TOKEN

CONFIG = """\
providers:
  alpha: {models: [m, n], base_url: "http://127.0.0.1:9/v1",
          connections: [{id: a1, api_key: sk-alpha-0001}, a2]}
  beta: {models: [m], base_url: "http://127.0.0.1:9/v1", connections: [b1]}
routes:
  chat: {targets: [alpha/m, beta/m]}
"""


def _gateway() -> Gateway:
    config = load_router_config("router.yaml", text=CONFIG)
    router = config.build(SystemClock())
    engine = router.engine
    engine.record("alpha", "a1", "m", BreakerAdmission(True, 0),
                  Classification(FailureKind.FORBIDDEN))  # a lockout to list and clear
    return Gateway(router, config.providers, token=TOKEN)


GATEWAY = _gateway()
schema = schemathesis.openapi.from_asgi("/api/resilience/openapi.json", GATEWAY.asgi())
# the event stream never ends by itself; it has tests of its own
schema = schema.exclude(path="/api/resilience/events")


@schema.auth()
class BearerToken:
    def get(self, case: schemathesis.Case, context: object) -> str:
        return TOKEN

    def set(self, case: schemathesis.Case, data: str, context: object) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.parametrize()
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_management_api_conforms_to_its_document(case: schemathesis.Case) -> None:
    case.call_and_validate()

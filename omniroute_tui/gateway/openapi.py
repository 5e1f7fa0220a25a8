"""The management API's OpenAPI 3.1 document, served at `/api/resilience/openapi.json`.

Written by hand next to the handlers it describes; the test suite runs schemathesis against
it, so a handler that answers outside it (a status, a field, a 500) fails there.
"""

from __future__ import annotations

from typing import Any

from ..router.routes import Strategy

__all__ = ["MANAGEMENT_OPENAPI"]

_NAME = {"type": "string", "minLength": 1}
_MS = {"type": ["integer", "null"]}
# what the generator can produce of the durations accepted: one part, above 0, within
# 30 days (the API takes more: 1m30s, 30d)
_DURATION = r"^([1-9][0-9]{0,2}(ms|s|m)|[1-9][0-9]?h)$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _json(_ref("Error"), "The body is not what the call takes; the message says why."),
    "401": _json(_ref("Error"), "No `Authorization: Bearer <token>`, or the wrong one."),
    "413": _json(_ref("Error"), "The body is larger than 16 KiB."),
}
_NOT_FOUND = {"404": _json(_ref("Error"), "No such provider, connection or action.")}
_REASON = {"name": "X-Omniroute-Reason", "in": "header", "required": False,
           "description": "Why, for the audit log (UTF-8, 120 characters), after the name of "
                          "the token used: who acts is the token's, never a header's.",
           "schema": {"type": "string"}}
_FORBIDDEN = {"403": _json(_ref("Error"), "The token's role is `read`: it may not act.")}
_PROVIDER = {"name": "provider", "in": "path", "required": True, "schema": _NAME}


def _action(summary: str, *, body: dict[str, Any] | None = None, body_required: bool = False,
            parameters: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": [*parameters, _REASON],
        "responses": {"200": _json(_ref("ActionResult"), "Done; the state after it."),
                      **_ERRORS, **_FORBIDDEN, **_NOT_FOUND},
    }
    if body is not None:
        operation["requestBody"] = {"required": body_required,
                                    "content": {"application/json": {"schema": body}}}
    return operation


MANAGEMENT_OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "OmniRoute management API", "version": "1",
             "description": "Watch and operate the router's resilience state."},
    "security": [{"bearer": []}],
    "paths": {
        "/metrics": {"get": {
            "summary": "The router's metrics in Prometheus' text format (docs/metrics.md); "
                       "with `gateway: {metrics: public}` no token is asked.",
            "responses": {"200": {"description": "The state now and the traffic since start.",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          "401": _ERRORS["401"],
                          "503": {"description": "The scrape failed; the log says why.",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}},
        }},
        "/api/resilience/state": {"get": {
            "summary": "Breakers, connections (keys masked), lockouts and the store's health; "
                       "`caller`: the name and role of the token used.",
            "responses": {"200": _json(_ref("State"), "The state now."), "401": _ERRORS["401"]},
        }},
        "/api/resilience/events": {"get": {
            "summary": "The engine's events as Server-Sent Events, in order.",
            "responses": {"200": {"description": "An endless event stream; a client too far "
                                                 "behind gets a `dropped` event and the end.",
                                  "content": {"text/event-stream": {"schema":
                                                                    {"type": "string"}}}},
                          "401": _ERRORS["401"]},
        }},
        "/api/resilience/audit": {"get": {
            "summary": "Operator actions: who, what, when, result.",
            "responses": {"200": _json({"type": "object", "required": ["entries"],
                                        "properties": {"entries": {
                                            "type": "array", "items": _ref("AuditEntry")}}},
                                       "Oldest first."),
                          "401": _ERRORS["401"]},
        }},
        "/api/resilience/history": {"get": {
            "summary": "Recent state changes (breaker, cooldown, disabled, enabled, lockout, "
                       "operator, fault events), oldest first: what a console shows "
                       "when it attaches (from the state database when there is one: "
                       "days of them, from before the gateway started too).",
            "parameters": [{"name": "limit", "in": "query", "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
            "responses": {"200": _json({"type": "object", "required": ["events"],
                                        "properties": {"events": {
                                            "type": "array", "items": {
                                                "type": "object", "required": ["t", "type"],
                                                "properties": {
                                                    "t": {"type": "integer"},
                                                    "type": {"type": "string"}}}}}},
                                       "Oldest first, at most `limit` (default 1000)."),
                          "400": _ERRORS["400"], "401": _ERRORS["401"]},
        }},
        "/api/requests/{request_id}": {"get": {
            "summary": "A request's decision steps by its id (its answer's `x-request-id`), "
                       "on any replica: its records (the replica that served it, the "
                       "status the client got, and its events: request, attempts, "
                       "results, skips, waits, budget, response), kept for the last hour "
                       "by default, and its events so far if it is in flight here.",
            "parameters": [{"name": "request_id", "in": "path", "required": True,
                            "schema": {"type": "string",
                                       "pattern": "^[A-Za-z0-9._:-]{1,128}$"}}],
            "responses": {"200": _json({
                "type": "object", "required": ["id", "kept_in", "records"],
                "properties": {
                    "id": {"type": "string"},
                    "kept_in": {"enum": ["redis", "database", "memory"]},
                    "records": {"type": "array", "items": {
                        "type": "object", "required": ["replica", "status", "events"],
                        "properties": {
                            "replica": {"type": ["string", "null"]},
                            "status": {"type": ["integer", "null"]},
                            "events": {"type": "array", "items": {"type": "object"}}}}},
                    "in_flight": {"type": "object"},
                    "unreadable_records": {"type": "integer"}}},
                "Oldest first; a client that reused the id has several."),
                "400": _ERRORS["400"], "401": _ERRORS["401"],
                "404": _json(_ref("Error"), "No record of that id is kept (past the "
                                            "records' age, or never seen)."),
                "503": _json(_ref("Error"), "Where records are kept did not answer "
                                            "(with `Retry-After`).")},
        }},
        "/api/resilience/breakers/{provider}/reset": {"post": _action(
            "Breaker to CLOSED, counters zeroed.", parameters=(_PROVIDER,))},
        "/api/resilience/breakers/{provider}/force-open": {"post": _action(
            "Isolate a provider for a time (default 5m, at most 30 days).",
            parameters=(_PROVIDER,),
            body={"type": "object", "additionalProperties": False,
                  "properties": {"for": {
                      "description": "A duration with a unit (250ms, 90s, 5m, 1h, 1m30s, "
                                     "up to 30d) or integer milliseconds; above 0.",
                      "oneOf": [{"type": "string", "pattern": _DURATION},
                                {"type": "integer", "minimum": 1,
                                 "maximum": 2_592_000_000}]}}})},
        "/api/resilience/connections/{provider}/{connection}/{action}": {"post": _action(
            "Clear a connection's cooldown, or enable or disable it.",
            parameters=(_PROVIDER,
                        {"name": "connection", "in": "path", "required": True, "schema": _NAME},
                        {"name": "action", "in": "path", "required": True,
                         "schema": {"enum": ["clear", "enable", "disable"]}}))},
        "/api/resilience/lockouts": {"delete": _action(
            "Clear model lockouts: any of provider, connection, model, or all of them.",
            body={"oneOf": [
                {"type": "object", "additionalProperties": False, "required": ["all"],
                 "properties": {"all": {"const": True}}},
                {"type": "object", "additionalProperties": False, "minProperties": 1,
                 "properties": {"provider": _NAME, "connection": _NAME, "model": _NAME},
                 "dependentRequired": {"connection": ["provider"]}}]}, body_required=True)},
        "/api/resilience/reload": {"post": {
            "summary": "Read the config file again: a good one is swapped in between two "
                       "decisions (what is unchanged keeps its state); one with any problem "
                       "is refused whole and the running config stays.",
            "parameters": [_REASON],
            "requestBody": {"required": False, "content": {"application/json": {
                "schema": {"type": "object", "maxProperties": 0}}}},
            "responses": {
                "200": _json(_ref("ReloadResult"), "Taken: its version and what changed."),
                "409": _json(_ref("Error"), "The router was not started from a config file."),
                "422": _json(_ref("ReloadRefused"), "Refused: every problem, with its file, "
                                                    "line and field."),
                **_ERRORS, **_FORBIDDEN}}},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["message", "type"],
                "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                               "param": {"type": ["string", "null"]},
                               "code": {"type": ["string", "null"]}}}}},
            "Breaker": {"type": "object", "required": ["provider", "state", "failures"],
                        "properties": {
                            "provider": {"type": "string"},
                            "state": {"enum": ["CLOSED", "DEGRADED", "OPEN", "HALF_OPEN"]},
                            "failures": {"type": "integer"}, "threshold": {"type": "integer"},
                            "cycles": {"type": "integer"}, "opened_at": _MS,
                            "open_for_ms": {"type": "integer"}, "retry_after_ms": _MS,
                            "forced_until": _MS, "forced_by": {"type": ["string", "null"]},
                            "probes_in_flight": {"type": "integer"}}},
            "Connection": {"type": "object", "required": ["provider", "connection"],
                           "properties": {
                               "provider": {"type": "string"}, "connection": {"type": "string"},
                               "level": {"type": "integer"}, "max_level": {"type": "integer"},
                               "cooling_until": {"type": "integer"},
                               "cooling": {"type": "boolean"}, "disabled": {"type": "boolean"},
                               "disabled_reason": {"type": ["string", "null"]},
                               "last_error": {"type": ["string", "null"]},
                               "key": {"type": ["string", "null"],
                                       "description": "At most its last 4 characters."}}},
            "Lockout": {"type": "object", "required": ["provider", "connection", "model"],
                        "properties": {
                            "provider": {"type": "string"}, "connection": {"type": "string"},
                            "model": {"type": "string"}, "kind": {"type": ["string", "null"]},
                            "failures": {"type": "integer"}, "until": {"type": "integer"}}},
            "Route": {"type": "object", "required": ["name", "strategy", "targets"],
                      "properties": {
                          "name": {"type": "string"},
                          "strategy": {"enum": [s.value for s in Strategy]},
                          "targets": {"type": "array", "items": {
                              "type": "string", "description": "provider/model"}},
                          "weights": {"type": ["array", "null"],
                                      "items": {"type": "integer"},
                                      "description": "One per target, for `weighted`; "
                                                     "null: each weighs 1."}}},
            "StoreHealth": {"type": ["object", "null"], "properties": {
                "ok": {"type": "boolean"}, "failing_since": _MS,
                "error": {"type": ["string", "null"]}, "pending": {"type": "integer"}}},
            "ConfigStatus": {"type": ["object", "null"], "properties": {
                "path": {"type": ["string", "null"]},
                "version": {"type": "string", "description": "The file's sha256, 12 hex."},
                "loaded_at_ms": {"type": "integer"}, "reloads": {"type": "integer"},
                "failures": {"type": "integer"}, "last_reload_ok": {"type": "boolean"},
                "last_error": {"type": ["string", "null"]}, "last_attempt_ms": _MS}},
            "ReloadSummary": {"type": "object", "properties": {
                name: {"type": "array", "items": {"type": "string"}} for name in (
                    "providers_added", "providers_removed", "providers_changed",
                    "connections_added", "connections_removed", "routes_added",
                    "routes_removed", "routes_changed")}},
            "ReloadResult": {"type": "object", "required": ["ok", "version", "summary"],
                             "properties": {"ok": {"const": True},
                                            "version": {"type": "string"},
                                            "summary": _ref("ReloadSummary"),
                                            "restart_needed": {"type": "array", "items": {
                                                "type": "string"}}}},
            "ReloadRefused": {"type": "object", "required": ["ok", "version", "problems"],
                              "properties": {
                                  "ok": {"const": False}, "version": {"type": "string"},
                                  "error": {"type": "object"},
                                  "problems": {"type": "array", "items": {
                                      "type": "object",
                                      "required": ["file", "line", "field", "reason"],
                                      "properties": {"file": {"type": "string"},
                                                     "line": {"type": ["integer", "null"]},
                                                     "field": {"type": "string"},
                                                     "reason": {"type": "string"},
                                                     "text": {"type": "string"}}}}}},
            "State": {"type": "object",
                      "required": ["now", "breakers", "connections", "lockouts", "store"],
                      "properties": {
                          "now": {"type": "integer"},
                          "breakers": {"type": "array", "items": _ref("Breaker")},
                          "connections": {"type": "array", "items": _ref("Connection")},
                          "lockouts": {"type": "array", "items": _ref("Lockout")},
                          "routes": {"type": "array", "items": _ref("Route")},
                          "store": _ref("StoreHealth"),
                          "config": _ref("ConfigStatus"),
                          "caller": {"type": "object", "required": ["name", "role"],
                                     "properties": {"name": {"type": "string"},
                                                    "role": {"enum": ["read", "operate"]}}}}},
            "ActionResult": {"allOf": [_ref("State"), {
                "type": "object", "required": ["ok"],
                "properties": {"ok": {"const": True}, "cleared": {"type": "integer"},
                               "shared": {"type": "boolean", "description":
                                          "In a fleet: the action reached the shared store "
                                          "(false: it is queued and goes out on reconnect)."}}}]},
            "AuditEntry": {"type": "object",
                           "required": ["t", "actor", "action", "target", "result"],
                           "properties": {"t": {"type": "integer"}, "actor": {"type": "string"},
                                          "action": {"type": "string"},
                                          "target": {"type": "string"},
                                          "result": {"type": "string"}}},
        },
    },
}

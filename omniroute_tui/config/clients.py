"""Who may send requests through the gateway, and how much: client keys by tenant.

`gateway.clients` names each tenant with the SHA-256 of its keys (the config holds no
key), the routes it may ask for, and its limits: requests and tokens a minute, tokens a
UTC day. Absent, the gateway takes requests from anyone who reaches its port, as before
(docs/gateway.md, "Client keys").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .operators import DIGEST, NAME, token_digest
from .problems import Path
from .readers import read_mapping, read_name, read_str, reject_unknown
from .yaml_source import Source

__all__ = ["MAX_TENANTS", "ClientKeys", "Tenant", "parse_clients"]

#: tenants at most: each is a label value of the client metrics
MAX_TENANTS = 1000
#: keys at most per tenant (rotation needs two; a team may have one per service)
MAX_KEYS = 100
#: a limit at most: the counts stay exact in Redis' Lua numbers (doubles)
_LIMIT_MAX = 10**9


@dataclass(frozen=True)
class Tenant:
    """A tenant's name, the routes it may ask for (None: all) and its limits (0: none)."""

    name: str
    routes: frozenset[str] | None = None
    rpm: int = 0
    tpm: int = 0
    tokens_per_day: int = 0

    def may_use(self, model: str) -> bool:
        return self.routes is None or model in self.routes


@dataclass(frozen=True)
class ClientKeys:
    """The tenants by the digest of each of their keys; empty: client keys are off."""

    by_digest: Mapping[str, Tenant] = field(default_factory=lambda: MappingProxyType({}))
    tenants: Mapping[str, Tenant] = field(default_factory=lambda: MappingProxyType({}))

    def __bool__(self) -> bool:
        return bool(self.tenants)

    def identify(self, key: str) -> Tenant | None:
        """The tenant whose key this is, or None. Found by the digest of what was sent,
        so the time it takes says nothing of any key."""
        return self.by_digest.get(token_digest(key))


def parse_clients(src: Source, value: Any, path: Path) -> ClientKeys:
    """`gateway.clients`: `{tenant: {keys: [<sha256>, ...], routes: [...], rpm, tpm,
    tokens_per_day}}`."""
    body = read_mapping(src, value, path)
    if body is None:
        return ClientKeys()
    if not body:  # an empty file or `{}` would open the gateway to anyone, unsaid
        src.problem(path, "no tenants: name at least one, or leave gateway.clients out to "
                          "take requests without client keys")
        return ClientKeys()
    if len(body) > MAX_TENANTS:
        src.problem(path, f"{len(body):,} tenants: at most {MAX_TENANTS:,}")
        return ClientKeys()
    digests: dict[str, Tenant] = {}
    tenants: dict[str, Tenant] = {}
    for name, entry in body.items():
        where = path + (str(name),)
        if not isinstance(name, str) or not NAME.fullmatch(name):
            src.problem(where, "a tenant's name is 1 to 64 of A-Z a-z 0-9 . _ @ - (not "
                               "starting with a sign)")
            continue
        fields = read_mapping(src, entry, where)
        if fields is None:
            continue
        reject_unknown(src, fields, where, ("keys", "routes", "rpm", "tpm", "tokens_per_day"))
        limits = {limit: _limit(src, fields[limit], where + (limit,))
                  for limit in ("rpm", "tpm", "tokens_per_day") if limit in fields}
        tenant = Tenant(name, _routes(src, fields, where), **limits)
        tenants[name] = tenant
        keys = fields.get("keys")
        if not isinstance(keys, list) or not keys or len(keys) > MAX_KEYS:
            src.problem(where + ("keys",), f"expected a list of 1 to {MAX_KEYS} keys' SHA-256")
            continue
        for index, item in enumerate(keys):
            at = where + ("keys", index)
            digest = read_str(src, item, at)
            if digest is None:
                continue
            digest = digest.strip().lower()
            if not DIGEST.fullmatch(digest):
                src.problem(at, "the SHA-256 of the key, 64 hex digits (printf %s \"$KEY\" | "
                                "sha256sum), never the key itself")
            elif digest in digests:
                src.problem(at, f"the same key as tenant {digests[digest].name!r}'s: a key "
                                "belongs to one tenant")
            else:
                digests[digest] = tenant
    return ClientKeys(MappingProxyType(digests), MappingProxyType(tenants))


def _routes(src: Source, fields: Mapping[str, Any], where: Path) -> frozenset[str] | None:
    if "routes" not in fields:
        return None
    value = fields["routes"]
    if not isinstance(value, list) or not value:
        src.problem(where + ("routes",), "expected a list of route or provider/model names "
                                         "(leave it out for all)")
        return frozenset()
    names = [read_name(src, item, where + ("routes", i)) for i, item in enumerate(value)]
    return frozenset(name for name in names if name is not None)


def _limit(src: Source, value: Any, path: Path) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _LIMIT_MAX:
        src.problem(path, f"expected a whole number from 1 to {_LIMIT_MAX:,} (leave it out "
                          f"for no limit), got {str(value)[:40]!r}")
        return 0
    return value

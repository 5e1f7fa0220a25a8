"""Who may use the management API, and for what: named tokens with a role.

`gateway.operators` names each operator with its role and the SHA-256 of its token, so
the config holds no token (a copy of the file lets no one in); the audit's actor is the
name of the token used. The single token of `--token-file` / `$OMNIROUTE_TOKEN` is an
operator too, named `operator`, with the role `operate`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from .problems import Path
from .readers import read_mapping, read_str, reject_unknown
from .yaml_source import Source

__all__ = ["DIGEST", "MAX_REASON_CHARS", "NAME", "SINGLE_TOKEN_NAME", "Operator",
           "OperatorTokens", "Role",
           "parse_operators", "token_digest"]

#: the name the single token of `--token-file` / `$OMNIROUTE_TOKEN` has in the audit
SINGLE_TOKEN_NAME = "operator"
#: what of a reason the audit keeps
MAX_REASON_CHARS = 120
#: a name a config gives a person or a team (an operator, a tenant), and a SHA-256 in hex
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
DIGEST = re.compile(r"[0-9a-f]{64}")


class Role(StrEnum):
    READ = "read"  # the state, the events, the history, the audit, /metrics
    OPERATE = "operate"  # all of read, and the actions and the reload


@dataclass(frozen=True)
class Operator:
    name: str
    role: Role

    @property
    def may_operate(self) -> bool:
        return self.role is Role.OPERATE

    def acting(self, reason: str) -> str:
        """The audit's actor: the name, and `reason` after it in parentheses when it says
        anything. A reason is a header's (latin-1 as it arrives, read as UTF-8 when it is);
        any white space is one space, what else would not show is dropped, and 120
        characters are kept."""
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            reason = reason.encode("latin-1").decode("utf-8")
        shown = "".join(" " if c.isspace() else c for c in reason
                        if c.isspace() or unicodedata.category(c)[0] not in "CZ")
        said = " ".join(shown.split())[:MAX_REASON_CHARS].strip()
        return f"{self.name} ({said})" if said else self.name


def token_digest(token: str) -> str:
    """What a config holds of a token: `printf %s "$TOKEN" | sha256sum`."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class OperatorTokens:
    """The management API's tokens: those of `gateway.operators` by their digest, and
    the single token of `--token-file` if there is one."""

    by_digest: Mapping[str, Operator] = field(default_factory=lambda: MappingProxyType({}))
    single: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return bool(self.by_digest) or self.single is not None

    def with_single(self, token: str | None) -> OperatorTokens:
        return OperatorTokens(self.by_digest, token)

    def identify(self, header: str | None) -> Operator | None:
        """The operator whose token `Authorization: Bearer <token>` carries, or None.
        The single token is compared in constant time; the others are looked up by the
        digest of what was sent (its time says nothing of any token)."""
        if not header or not header.startswith("Bearer "):
            return None
        token = header[7:].strip()
        if self.single is not None and hmac.compare_digest(token.encode(),
                                                           self.single.encode()):
            return Operator(SINGLE_TOKEN_NAME, Role.OPERATE)
        return self.by_digest.get(token_digest(token)) if self.by_digest else None


def parse_operators(src: Source, value: Any, path: Path) -> OperatorTokens:
    """`gateway.operators`: `{name: {role: read|operate, token_sha256: <64 hex>}}`."""
    body = read_mapping(src, value, path)
    if body is None:
        return OperatorTokens()
    found: dict[str, Operator] = {}
    for name, entry in body.items():
        where = path + (str(name),)
        if not isinstance(name, str) or not NAME.fullmatch(name) or \
                name == SINGLE_TOKEN_NAME:
            src.problem(where, "an operator's name is 1 to 64 of A-Z a-z 0-9 . _ @ - "
                               f"(not starting with a sign), and not {SINGLE_TOKEN_NAME!r} "
                               "(the single token's)")
            continue
        fields = read_mapping(src, entry, where)
        if fields is None:
            continue
        reject_unknown(src, fields, where, ("role", "token_sha256"))
        role = fields.get("role")
        if not isinstance(role, str) or role not in Role._value2member_map_:
            src.problem(where + ("role",), f"expected read or operate, got {role!r:.40}")
            continue
        digest = read_str(src, fields.get("token_sha256"), where + ("token_sha256",))
        if digest is None:
            continue
        digest = digest.strip().lower()
        if not DIGEST.fullmatch(digest):
            src.problem(where + ("token_sha256",), "the SHA-256 of the token, 64 hex digits "
                        "(printf %s \"$TOKEN\" | sha256sum), never the token itself")
            continue
        if digest in found:
            src.problem(where + ("token_sha256",), f"the same token as "
                        f"{found[digest].name!r}: each operator has its own")
            continue
        found[digest] = Operator(name, Role(role))
    return OperatorTokens(MappingProxyType(found))

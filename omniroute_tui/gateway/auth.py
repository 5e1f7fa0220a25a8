"""Bearer-token checks for the management API (constant-time comparison)."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

__all__ = ["TokenError", "bearer_matches", "load_token"]

TOKEN_ENV = "OMNIROUTE_TOKEN"


class TokenError(ValueError):
    """No usable token: the message says where one was looked for."""


def load_token(token_file: str | Path | None) -> str | None:
    """The token from `token_file`, else from $OMNIROUTE_TOKEN, else None."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise TokenError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        if len(token) < 16:
            raise TokenError(f"the token in {token_file} is shorter than 16 characters")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def bearer_matches(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())

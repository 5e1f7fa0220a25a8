"""The bearer-token check of the management API (constant-time comparison)."""

from __future__ import annotations

import hmac

__all__ = ["bearer_matches"]

def bearer_matches(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())

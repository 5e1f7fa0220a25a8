"""The management API's bearer token: where it is read from and what makes one usable.

The gateway checks it, and the console's attach and `omniroute-sim record --from` send it,
so it lives with the configuration rather than in any one of them.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_ENV", "TokenError", "load_token"]

TOKEN_ENV = "OMNIROUTE_TOKEN"
MIN_TOKEN_CHARS = 16


class TokenError(ValueError):
    """No usable token: the message says where one was looked for."""


def load_token(token_file: str | Path | None) -> str | None:
    """The token from `token_file`, else from $OMNIROUTE_TOKEN, else None."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise TokenError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        return _usable(token, f"the token in {token_file}")
    token = os.environ.get(TOKEN_ENV, "").strip()
    return _usable(token, f"${TOKEN_ENV}") if token else None


def _usable(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"{where} is shorter than {MIN_TOKEN_CHARS} characters; make one "
                         "with: head -c 24 /dev/urandom | base64")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise TokenError(f"{where} must be printable ASCII without spaces")
    return token

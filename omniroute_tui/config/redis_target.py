"""Where a fleet's Redis is: a plain URL (redis://, rediss://, unix://) or a Sentinel
group, `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]`
(docs/design.md §10). Parsed here, without I/O, so the config file and `--redis` are
checked alike and the link connects to what was checked."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

__all__ = ["SENTINEL_PORT", "SENTINEL_SCHEME", "SentinelTarget", "describe_redis_url",
           "parse_redis_url", "parse_sentinel_address"]

SENTINEL_SCHEME = "redis+sentinel://"
SENTINEL_PORT = 26379  # Sentinel's own default port
_PLAIN_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class SentinelTarget:
    """A master that Sentinel names `service`, found through any of `sentinels`."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None

    def to_url(self) -> str:
        """The canonical `redis+sentinel://` form (what the config's mapping form reads as)."""
        auth = ""
        if self.password is not None:
            auth = f"{quote(self.username or '', safe='')}:{quote(self.password, safe='')}@"
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"{SENTINEL_SCHEME}{auth}{hosts}/{quote(self.service, safe='')}/{self.db}"

    def describe(self) -> str:
        """For logs and `/health`: the sentinels and the service, never the password."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"Sentinel {hosts} service {self.service!r} db {self.db}"


def describe_redis_url(url: str) -> str:
    """A plain URL for logs and `/health`: its password (in the address or the query)
    written as `***`, since a secret is never shown in full."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}"
    query = urlencode([(k, "***" if k == "password" else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def parse_redis_url(url: str) -> str | SentinelTarget:
    """A plain URL as given (redis-py reads it), or the Sentinel group it names; a
    ValueError saying what is wrong otherwise."""
    if url.startswith(_PLAIN_SCHEMES):
        return url
    if not url.startswith(SENTINEL_SCHEME):
        raise ValueError("expected a redis://, rediss://, unix:// or redis+sentinel:// URL")
    rest = url[len(SENTINEL_SCHEME):]
    if "?" in rest or "#" in rest:
        raise ValueError("a redis+sentinel:// URL takes no query or fragment")
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        if ":" not in auth:
            raise ValueError("write the password as :PASSWORD@ (or USER:PASSWORD@)")
        user, _, secret = auth.partition(":")
        username, password = unquote(user) or None, unquote(secret)
    if not netloc:
        raise ValueError("no sentinel: write redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE")
    sentinels = tuple(parse_sentinel_address(part) for part in netloc.split(","))
    service, _, db_text = path.partition("/")
    service = unquote(service)
    if not service:
        raise ValueError("no service: write the master's name after the sentinels "
                         "(redis+sentinel://HOST:PORT/mymaster)")
    db = 0
    if db_text:
        if not db_text.isdigit() or not db_text.isascii():
            raise ValueError(f"the db is a whole number, not {db_text!r}")
        db = int(db_text)
    return SentinelTarget(sentinels, service, db, username, password)


def parse_sentinel_address(text: str) -> tuple[str, int]:
    """`host:port`, `host` (port 26379) or `[v6]:port`; a ValueError naming it otherwise."""
    host, port_text = text, ""
    if text.startswith("["):
        host, bracket, after = text[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise ValueError(f"a sentinel is HOST:PORT, not {text!r}")
        port_text = after[1:]
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not host or any(c in host for c in "[]/@ ,"):
        raise ValueError(f"a sentinel is HOST:PORT, not {text!r}")
    if not port_text:
        return host, SENTINEL_PORT
    if not port_text.isdigit() or not port_text.isascii() or not 0 < int(port_text) < 65536:
        raise ValueError(f"a sentinel's port is 1-65535, not {port_text!r} (in {text!r})")
    return host, int(port_text)

"""Where a fleet's Redis is: the `redis+sentinel://` form, read alike from `--redis` and
the config file, and the link it makes (no network needed to build one)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.config.redis_target import SentinelTarget, describe_redis_url, parse_redis_url
from omniroute_tui.fleet.redis_link import RedisLink
from omniroute_tui.gateway.cli import main


def test_plain_urls_pass_through_for_redis_py() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://:pw@h:6380/1", "unix:///run/r.sock"):
        assert parse_redis_url(url) == url


def test_the_sentinel_form() -> None:
    assert parse_redis_url("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster") == \
        SentinelTarget((("127.0.0.1", 26379), ("127.0.0.1", 26380)), "mymaster")
    assert parse_redis_url("redis+sentinel://:s%40cret@a,[::1]:26381/fleet/3") == \
        SentinelTarget((("a", 26379), ("::1", 26381)), "fleet", 3, None, "s@cret")
    assert parse_redis_url("redis+sentinel://ops:pw@a:1/m") == \
        SentinelTarget((("a", 1),), "m", 0, "ops", "pw")


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:6379", "redis://, rediss://, unix:// or redis+sentinel://"),
    ("redis+sentinel:///mymaster", "no sentinel"),
    ("redis+sentinel://a:26379", "no service"),
    ("redis+sentinel://a:26379/", "no service"),
    ("redis+sentinel://a:0/m", "port is 1-65535, not '0'"),
    ("redis+sentinel://a:x/m", "port is 1-65535, not 'x'"),
    ("redis+sentinel://a,,b/m", "a sentinel is HOST:PORT, not ''"),
    ("redis+sentinel://[::1/m", "a sentinel is HOST:PORT"),
    ("redis+sentinel://a/m/zero", "the db is a whole number, not 'zero'"),
    ("redis+sentinel://a/m?db=1", "no query"),
    ("redis+sentinel://secret@a/m", "write the password as :PASSWORD@"),
])
def test_a_bad_url_says_what_is_wrong(url: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_redis_url(url)
    assert words in str(caught.value)


_HOST = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True)


@given(st.lists(st.tuples(_HOST, st.integers(1, 65535)), min_size=1, max_size=4),
       st.text(min_size=1, max_size=20), st.integers(0, 15),
       st.none() | st.text(max_size=20))
def test_the_canonical_url_reads_back_as_itself(
        sentinels: list[tuple[str, int]], service: str, db: int, password: str | None) -> None:
    target = SentinelTarget(tuple(sentinels), service, db, None, password)
    assert parse_redis_url(target.to_url()) == target
    assert password is None or f":{password}@" not in target.describe()


async def test_a_sentinel_url_links_through_sentinel() -> None:
    link = RedisLink("redis+sentinel://127.0.0.1:1,127.0.0.1:2/fleet/2")
    pool = link._redis.connection_pool
    assert (pool.service_name, pool.is_master, pool.connection_kwargs["db"]) == ("fleet", True, 2)
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs[
        "port"]) for s in link._sentinel.sentinels] == [("127.0.0.1", 1), ("127.0.0.1", 2)]  # type: ignore[union-attr]
    await link.close()


def test_the_gateway_names_a_bad_redis_url(capsys: pytest.CaptureFixture[str],
                                           tmp_path: object) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "router.yaml"
    config.write_text("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
                      "connections: [{id: a, api_key: sk-test-key-00001}]}\nroutes:\n"
                      "  r: {targets: [p/m]}\n")
    assert main(["--config", str(config), "--redis", "redis+sentinel://a:99999/m"]) == 2
    assert "--redis: a sentinel's port is 1-65535, not '99999'" in capsys.readouterr().err


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://bob:s3cret@h/1", "redis://bob:***@h/1"),
    ("rediss://u:p%40x@h:1/0?ssl_cert_reqs=none", "rediss://u:***@h:1/0?ssl_cert_reqs=none"),
    ("unix:///tmp/r.sock?db=0&password=s3cret", "unix:///tmp/r.sock?db=0&password=***"),
])
def test_a_plain_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert describe_redis_url(url) == shown

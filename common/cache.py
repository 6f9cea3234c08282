"""Django's Redis cache backend, minus a per-call cost.

Django's ``RedisCacheClient.get_client`` builds a new ``redis.Redis`` object for every cache call
(``Redis.__init__`` fills a table of about 250 response callbacks each time): about a tenth of a
millisecond of CPU per call, and the labelling loop makes several calls per request. ``Redis``
objects are thin and safe to share (the connection pool does the work), so this client keeps one per
connection pool. Behaviour is otherwise Django's: same options, keys, serialisation and pools.

Settings use it in place of ``django.core.cache.backends.redis.RedisCache``.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class ReusingRedisCacheClient(RedisCacheClient):
    """``RedisCacheClient`` that builds one ``redis.Redis`` per connection pool, not one per call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}  # id(connection pool) -> redis.Redis

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class ReusingRedisCache(RedisCache):
    """Django's ``RedisCache`` on ``ReusingRedisCacheClient``."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusingRedisCacheClient

"""The Elasticsearch client the adapters share, and how they translate its errors.

:func:`es_client` makes a client that encodes and decodes with orjson; :func:`es_errors` is the
one place the adapters turn the client's errors into :class:`~topology.errors.StoreUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
from elasticsearch import ApiError, AsyncElasticsearch, TransportError
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

from topology.errors import StoreUnavailable


class _OrjsonNdjson(NdjsonSerializer):
    """Bulk bodies through orjson (the default ndjson serializer uses the standard json module)."""

    def json_dumps(self, data: Any) -> bytes:
        return orjson.dumps(data, default=self.default, option=orjson.OPT_SERIALIZE_NUMPY)

    def json_loads(self, data: bytes) -> Any:
        return orjson.loads(data)


def es_client(url: str, api_key: str | None = None, *, basic_auth: tuple[str, str] | None = None,
              ca_file: str | None = None) -> AsyncElasticsearch:
    """An async client of the node(s) of ``url`` (comma-separated) that encodes and decodes with
    orjson (vectors make JSON the hot path). Credentials: an API key or ``basic_auth`` (user,
    password); ``https`` nodes are verified against ``ca_file`` (or the system's CAs)."""
    if api_key and basic_auth:
        raise ValueError("give Elasticsearch an API key or a username and password, not both")
    hosts = [u.strip() for u in url.split(",") if u.strip()]
    tls: dict[str, Any] = {"ca_certs": ca_file} if ca_file else {}
    return AsyncElasticsearch(hosts, api_key=api_key, basic_auth=basic_auth, **tls, serializers={
        "application/json": OrjsonSerializer(), "application/x-ndjson": _OrjsonNdjson()})


@contextlib.contextmanager
def es_errors(what: str) -> Iterator[None]:
    """The client's errors raised inside (``ApiError``: the server answered with an error;
    ``TransportError``: no answer) become :class:`StoreUnavailable` ``"elasticsearch {what}:
    {error}"``, the original as its cause; ``what`` names the operation and its index. The one
    place this adapter translates its backend's exceptions."""
    try:
        yield
    except (ApiError, TransportError) as exc:
        raise StoreUnavailable(f"elasticsearch {what}: {exc}") from exc


def failed_items(res: Any, conflicts_ok: bool = False) -> list[dict[str, Any]]:
    """The failed items of a bulk response (``conflicts_ok``: a ``create`` of an existing
    document, status 409, is not a failure)."""
    if not res.get("errors"):
        return []
    return [i for item in res["items"] for i in item.values()
            if "error" in i and not (conflicts_ok and i.get("status") == 409)]


def retrieved(task: asyncio.Future[None]) -> None:
    """A background request's done-callback: its failure is marked seen (whoever waits for it
    raises it; nobody may)."""
    if not task.cancelled():
        task.exception()

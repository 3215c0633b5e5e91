"""An HTTP proxy in front of an S3 endpoint that holds each request a fixed time, can answer
a share of them ``503 SlowDown``, and counts them by kind.

Real HTTP on 127.0.0.1 (aiohttp server and client, in a thread of its own): clients talk to
it exactly as to S3 (``endpoint_url`` = `S3Proxy.endpoint_url`), and it forwards each request
unchanged to the upstream endpoint (the moto server). Used by the tests that count requests
and inject SlowDown, and by `benchmarks/bench_object_store.py`.

Kinds: ``LIST`` (GET on a bucket: ListObjects/ListObjectsV2), ``GET``, ``HEAD``, ``PUT``,
``DELETE`` (one object), ``DeleteObjects`` (POST ``?delete``), ``POST`` (other), and
``SlowDown`` for the answers the proxy made up itself (those are not forwarded and are not
counted under their own kind).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>delta-ops-proxy</RequestId><HostId>delta-ops-proxy</HostId></Error>"
)
DENIED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message>"
    b"<RequestId>delta-ops-proxy</RequestId><HostId>delta-ops-proxy</HostId></Error>"
)
INTERNAL_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message>"
    b"<RequestId>delta-ops-proxy</RequestId><HostId>delta-ops-proxy</HostId></Error>"
)
# Hop-by-hop headers and those aiohttp sets itself.
_DROP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
     "proxy-connection", "te", "trailer", "upgrade"}
)


def request_kind(method: str, path: str, query: str) -> str:
    """The kind of an S3 request (see the module) from its method, path and query."""
    parts = [p for p in path.split("/") if p]
    if method == "GET":
        return "LIST" if len(parts) <= 1 else "GET"
    if method == "POST":
        return "DeleteObjects" if "delete" in query.split("&") or "delete=" in query else "POST"
    return method


class S3Proxy:
    """The proxy (see the module). Use as a context manager, or `start`/`stop`.

    Args:
        upstream: The S3 endpoint to forward to (``http://127.0.0.1:port``).
        latency: Seconds each request is held before it is forwarded (or refused).
        slowdown: Share of requests (0..1) answered ``503 SlowDown`` instead.
        seed: Seeds the choice of refused requests.
        deny: Given a request's kind and path with query (``/bucket?list-type=2&prefix=...``),
            True to answer it ``403 AccessDenied`` instead of forwarding it (counted as
            ``AccessDenied``): a store whose policy refuses some requests.
        ignore: Query parameters taken out of each request before it is forwarded (it is
            counted and recorded as sent): a store that ignores them.
        lose_answer: Given a request's kind and path with query, True to forward it and
            then answer ``500 InternalError`` (counted as ``LostAnswer`` too): a store
            that did the work but whose answer was lost.
    """

    def __init__(
        self, upstream: str, *, latency: float = 0.05, slowdown: float = 0.0, seed: int = 0,
        deny: Any = None, ignore: tuple[str, ...] = (), lose_answer: Any = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.latency = latency
        self.slowdown = slowdown
        self.deny = deny
        self.ignore = ignore
        self.lose_answer = lose_answer
        self._rng = random.Random(seed)
        self._counts: Counter[str] = Counter()
        #: (kind, path with query) of every request counted, in order, since the last
        #: `reset`.
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._session: Any = None
        self.port = 0
        #: Seconds the upstream took, summed, and the requests forwarded (moto's own time).
        self.upstream_seconds = 0.0
        self.forwarded = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, int]:
        """Requests by kind since the last `reset`."""
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Zero the counts and the upstream time."""
        with self._lock:
            self._counts.clear()
            self.requests.clear()
            self.upstream_seconds = 0.0
            self.forwarded = 0

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        kind = request_kind(request.method, request.path, request.query_string)
        body = await request.read()
        refuse = False
        if self.deny is not None and self.deny(kind, request.path_qs):
            with self._lock:
                self._counts["AccessDenied"] += 1
            return web.Response(status=403, body=DENIED_BODY, content_type="application/xml")
        with self._lock:
            if self.slowdown and self._rng.random() < self.slowdown:
                refuse = True
                self._counts["SlowDown"] += 1
            else:
                self._counts[kind] += 1
                self.requests.append((kind, request.path_qs))
        if self.latency:
            await asyncio.sleep(self.latency)
        if refuse:
            return web.Response(
                status=503, body=SLOWDOWN_BODY, content_type="application/xml"
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        path_qs = request.path_qs
        raw_query = request.rel_url.raw_query_string
        if self.ignore and raw_query:
            kept = [part for part in raw_query.split("&")
                    if part.split("=", 1)[0] not in self.ignore]
            path_qs = request.rel_url.raw_path + ("?" + "&".join(kept) if kept else "")
        t0 = time.perf_counter()
        async with self._session.request(
            request.method, self.upstream + path_qs, headers=headers, data=body,
            allow_redirects=False, auto_decompress=False,
        ) as up:
            payload = await up.read()
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _DROP}
            if request.method == "HEAD" and "Content-Length" in up.headers:
                # A HEAD answer has no body but tells the object's length.
                out_headers["Content-Length"] = up.headers["Content-Length"]
            status = up.status
        with self._lock:
            self.upstream_seconds += time.perf_counter() - t0
            self.forwarded += 1
        if self.lose_answer is not None and self.lose_answer(kind, request.path_qs):
            with self._lock:
                self._counts["LostAnswer"] += 1
            return web.Response(status=500, body=INTERNAL_BODY, content_type="application/xml")
        return web.Response(status=status, body=payload, headers=out_headers)

    def start(self) -> S3Proxy:
        """Start serving on a free port of 127.0.0.1."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            from aiohttp import ClientSession, TCPConnector, web

            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self._session = ClientSession(
                    connector=TCPConnector(limit=256), skip_auto_headers=("User-Agent",)
                )
                app = web.Application(client_max_size=1 << 30)
                app.router.add_route("*", "/{tail:.*}", self._handle)
                self._runner = web.AppRunner(app, access_log=None)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]

            try:
                loop.run_until_complete(boot())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="s3-proxy", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving."""
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            await self._runner.cleanup()
            await self._session.close()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._loop = None

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def storage_options(self) -> dict[str, Any]:
        """s3fs options reaching the upstream through this proxy (moto's credentials)."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def object_store_options(self) -> dict[str, str]:
        """The same for `deltalake` (object_store spelling)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }

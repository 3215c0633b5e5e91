"""The S3 backend's light client: botocore's synchronous S3 client alone, for reads.

s3fs brings aiobotocore, aiohttp and its event loop: about a second of imports before the
first request, which a read-only run (a snapshot, a listing, reading commits and
checkpoints) pays in full. The reads go through a plain botocore client instead, built from
the same s3fs options the way s3fs builds its own (credentials, endpoint, ``client_kwargs``,
``config_kwargs``, profile, ``anon``, ``use_ssl``; s3fs's 5 s connect and 15 s read
timeouts), retried as s3fs retries a call (SlowDown and dropped connections, 5 attempts,
on top of botocore's own), with errors translated as s3fs translates them (a missing key
is `FileNotFoundError`, a refusal `PermissionError`, anything else `OSError`, the
botocore error as the cause). Options this client does not reproduce (``requester_pays``,
``s3_additional_kwargs``, a ``session``...) leave every call to s3fs (`light_options`).
No section of the Delta protocol is implemented here.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

#: s3fs options the light client reproduces; the fsspec ones only steer s3fs's own caches.
_LIGHT_OPTIONS = frozenset(
    {"key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs", "use_ssl",
     "anon", "profile", "use_listings_cache", "skip_instance_cache", "listings_expiry_time",
     "max_paths"}
)
#: s3fs's timeouts (class attributes of `s3fs.S3FileSystem`) and its attempts per call.
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 15
ATTEMPTS = 5
#: Text of a ClientError s3fs retries (its `_error_wrapper`).
_RETRIED_TEXT = ("SlowDown", "reduce your request rate", "XAmzContentSHA256Mismatch")
_MISSING_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_REFUSED_CODES = frozenset(
    {"AccessDenied", "AccountProblem", "AllAccessDisabled", "ExpiredToken",
     "InvalidAccessKeyId", "InvalidObjectState", "InvalidSecurity", "InvalidToken",
     "NotSignedUp", "RequestTimeTooSkewed", "SignatureDoesNotMatch", "403"}
)


def light_options(kwargs: Mapping[str, Any]) -> bool:
    """Whether the light client reproduces the s3fs file system these s3fs `kwargs` make."""
    if not set(kwargs) <= _LIGHT_OPTIONS:
        return False
    config = kwargs.get("config_kwargs") or {}
    from botocore.config import Config

    # aiobotocore's AioConfig takes more (connector_args...), which botocore's refuses.
    return set(config) <= set(Config.OPTION_DEFAULTS)


_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


def shared(key: Any, build: Callable[[], T]) -> T:
    """`build()`, once per process for equal `key`s (the options a client is built from):
    as fsspec keeps one s3fs file system per set of options, storages opened with the same
    options share one client (and its connections) instead of building their own."""
    text = json.dumps(key, sort_keys=True, default=repr)
    with _SHARED_LOCK:
        found = _SHARED.get(text)
        if found is None:
            found = _SHARED[text] = build()
        return found


def make_client(
    kwargs: Mapping[str, Any], timestamp_parser: Callable[[Any], Any], session: Any = None
) -> tuple[Any, Any]:
    """(client, session): a botocore S3 client built from s3fs `kwargs` as s3fs builds its
    own (its `set_session`), whose responses parse timestamps with `timestamp_parser`; in
    `session` (one `make_client` returned) when given, else in a new one."""
    import botocore.session
    from botocore.config import Config

    if session is None:
        session = botocore.session.Session(profile=kwargs.get("profile"))
        session.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=timestamp_parser
        )
    client_kwargs = dict(kwargs.get("client_kwargs") or {})
    init = {
        name: kwargs.get(option)
        for name, option in (("aws_access_key_id", "key"), ("aws_secret_access_key", "secret"),
                             ("aws_session_token", "token"), ("endpoint_url", "endpoint_url"))
    }
    init = {k: v for k, v in init.items() if v is not None and v != client_kwargs.get(k)}
    if "use_ssl" not in client_kwargs:
        init["use_ssl"] = kwargs.get("use_ssl", True)
    config = dict(kwargs.get("config_kwargs") or {})
    config.setdefault("connect_timeout", CONNECT_TIMEOUT)
    config.setdefault("read_timeout", READ_TIMEOUT)
    if kwargs.get("anon"):
        from botocore import UNSIGNED

        secrets = {"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
        init = {k: v for k, v in init.items() if k not in secrets}
        client_kwargs = {k: v for k, v in client_kwargs.items() if k not in secrets}
        config["signature_version"] = UNSIGNED
    client = session.create_client("s3", config=Config(**config), **init, **client_kwargs)
    return client, session


def _translated(exc: Exception) -> Exception:
    """The exception s3fs raises for a botocore error (`s3fs.errors.translate_boto_error`):
    FileNotFoundError for a missing key or bucket, PermissionError for a refusal, OSError
    otherwise; the botocore error is its cause (`s3_bulk._client_error_code` reads it)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return exc
    error = response.get("Error", {})
    code = str(error.get("Code"))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    message = str(error.get("Message") or exc)
    if code in _MISSING_CODES or status == 404:
        return FileNotFoundError(message)
    if code in _REFUSED_CODES or status == 403:
        return PermissionError(message)
    return OSError(message)


def call(work: Callable[[], T]) -> T:
    """`work()` (one S3 request and the reading of its answer) with s3fs's retries: a
    SlowDown answer or a dropped or timed-out connection is tried again after 0.1 s,
    0.17 s, 0.29 s... up to `ATTEMPTS` times; botocore's own retries run inside each."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        HTTPClientError,
        IncompleteReadError,
    )
    from botocore.parsers import ResponseParserError
    from urllib3.exceptions import IncompleteRead

    failure: Exception | None = None
    for attempt in range(ATTEMPTS):
        try:
            return work()
        except ClientError as exc:
            failure = exc
            if not any(text in str(exc) for text in _RETRIED_TEXT):
                break
        except (TimeoutError, HTTPClientError, ConnectionError, IncompleteRead,
                IncompleteReadError, ResponseParserError) as exc:
            failure = exc
        if attempt + 1 < ATTEMPTS:
            time.sleep(min(1.7**attempt * 0.1, 15))
    assert failure is not None
    translated = _translated(failure)
    if translated is failure:
        raise failure
    raise translated from failure



class ThreadedClient:
    """A synchronous botocore client called as aiobotocore's is (`await
    client.list_objects_v2(...)`): each call runs in one of `workers` threads, so that
    the listings and deletes at the request limit (`s3_bulk`, written for an event loop)
    keep `workers` requests in flight without aiobotocore."""

    def __init__(self, client: Any, workers: int) -> None:
        from delta_ops.engine.threads import request_threads

        self.client = client
        self.workers = workers
        self._pool = request_threads(workers, "delta-ops-s3")

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        function = getattr(self.client, method)

        async def call(**kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, partial(function, **kwargs))

        return call

    @staticmethod
    def run(main: Callable[[], Awaitable[T]]) -> T:
        """`main()` on an event loop of its own, in a thread of its own (the caller's thread
        may be running a loop already), and its result."""
        from delta_ops.engine.threads import run_in_own_thread

        async def wrapped() -> T:
            return await main()

        return run_in_own_thread(lambda: asyncio.run(wrapped()))

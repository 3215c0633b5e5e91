"""S3 at its request limit: key ranges listed side by side, DeleteObjects batches sent
concurrently, each request retried with backoff and all of them under one concurrency
limit that halves on ``503 SlowDown`` (`parallel.AdaptiveLimit`).

These requests go through a client of their own whose botocore retries are off (s3fs's
retry loop is not used either): otherwise botocore (up to 5 attempts) and s3fs (5 more
around each) would retry a SlowDown answer themselves, multiplying the attempts and hiding
the answer from the limit. With the light client (`s3_client`), that client is
botocore's synchronous one called from threads (`s3_client.ThreadedClient`), and
aiobotocore is not imported. No section of the Delta protocol is implemented here.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from typing import Any

from delta_ops.storage.backend import Skip, without
from delta_ops.storage.parallel import (
    SPLIT_DEPTH,
    AdaptiveLimit,
    DeleteReport,
    Progress,
    RequestPolicy,
    Window,
    extrapolated_bounds,
    range_prefix,
    ranges_of,
)
from delta_ops.storage.s3_listing_answers import _listing_page, hook_listing
from delta_ops.storage.sorted_paths import in_range

#: Error codes by which S3 asks a client to send fewer requests.
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
     "TooManyRequests", "TooManyRequestsException", "RequestThrottled"}
)
#: Error codes of failures that a later attempt may not meet.
_TRANSIENT_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeoutException",
     "PriorRequestNotComplete", "503", "500"}
)


def _client_error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """(error code, HTTP status) of the botocore ClientError behind an s3fs exception."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, Mapping):
            code = response.get("Error", {}).get("Code")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return (str(code) if code is not None else None), status
        current = current.__cause__ or current.__context__
    return None, None


#: How long the files of a directory listed for its subdirectories are kept for the next
#: listing of its files (`_S3Bulk._take_remembered`): VACUUM lists them right after.
REMEMBER_SECONDS = 60.0
#: Most files kept that way (about 150 bytes each): a directory holding more is not kept,
#: and its next listing asks the store again, so that memory does not grow with a root of
#: millions of files.
REMEMBER_MAX_FILES = 500_000


class _AtMost:
    """A `Skip` names container that leaves out the names of `excluded` (when given), then
    admits the first `n` others it is asked about and leaves out the rest, so that a
    listing holds at most `n` files; `over` tells whether some were left out."""

    def __init__(self, n: int, excluded: Container[str] | None = None,
                 counter: _AtMost | None = None) -> None:
        self.left = n
        self.over = False
        self.excluded = excluded
        self._counter = counter if counter is not None else self

    def in_range(self, head: str, after: str | None, stop: str | None,
                 recursive: bool) -> _AtMost:
        """This container for one range of a listing (`sorted_paths.in_range`): `excluded`
        narrowed to the range, counting against this one."""
        if self.excluded is None:
            return self
        return _AtMost(0, in_range(self.excluded, head, after, stop, recursive), self._counter)

    def __contains__(self, name: object) -> bool:
        if self.excluded is not None and name in self.excluded:
            return True
        counter = self._counter
        if counter.left > 0:
            counter.left -= 1
            return False
        counter.over = True
        return True


class _S3Bulk:
    """The S3 backend's `list_ranges` and `delete_batches` (a mixin of `_S3Backend`)."""

    fs: Any
    errors: tuple[type[BaseException], ...]
    page_size: int | None
    delete_batch: int
    _fs_kwargs: dict[str, Any]
    _raw: Any
    light: bool
    _bulk_client: Callable[[RequestPolicy], Any]
    #: (directory, when, files, the `Skip` they leave out, files and bytes listed).
    _remembered: tuple[str, float, list[tuple[str, int, int]], Skip | None, int, int] | None
    #: Whether a range still paging after its first page is cut into more ranges
    #: (`parallel.extrapolated_bounds`).
    split_ranges = True
    #: Pages the last `list_ranges` waited for one after another at most (a measure of
    #: its time in round trips).
    longest_chain = 0

    @staticmethod
    def _split(native: str) -> tuple[str, str]:
        bucket, _, key = native.partition("/")
        return bucket, key

    @staticmethod
    def _dir_prefix(key: str) -> str:
        return f"{key}/" if key else ""

    def _raw_fs(self, policy: RequestPolicy) -> Any:
        """An s3fs file system like `fs` whose client does not retry and holds enough
        connections for `policy.concurrency` requests: the parallel listing and the batched
        delete retry themselves (`_request`), so that botocore's retries (and s3fs's on top
        of them) do not multiply theirs and hide SlowDown answers from the limit."""
        raw = self._raw
        if raw is None or raw.delta_ops_connections < policy.concurrency:
            import s3fs

            kwargs = dict(self._fs_kwargs)
            config = dict(kwargs.pop("config_kwargs", None) or {})
            config["retries"] = {"total_max_attempts": 1, "mode": "standard"}
            config["max_pool_connections"] = max(
                int(config.get("max_pool_connections", 10)), policy.concurrency
            )
            # The client shares the storage's botocore session (built already: the log
            # is read first): the S3 service model, tens of ms of JSON, is loaded once.
            from fsspec.asyn import sync

            sync(self.fs.loop, self.fs.set_session)
            if self.fs.session is not None and "session" not in kwargs:
                kwargs["session"] = self.fs.session
            raw = s3fs.S3FileSystem(**kwargs, config_kwargs=config, skip_instance_cache=True)
            raw.delta_ops_connections = policy.concurrency
            raw.delta_ops_hooked = False
            self._raw = raw
        return raw

    def _run(self, policy: RequestPolicy, body: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run `body(client)` on s3fs's event loop and wait for it; when reads go through
        the light client, on a loop of its own with botocore's synchronous client called
        from threads (`s3_client.ThreadedClient`), without s3fs."""
        if self.light:
            threaded = self._bulk_client(policy)
            return threaded.run(lambda: body(threaded))
        from fsspec.asyn import sync

        raw = self._raw_fs(policy)

        async def main() -> Any:
            await raw.set_session()
            if not raw.delta_ops_hooked:
                hook_listing(raw._s3.meta.events)
                raw.delta_ops_hooked = True
            return await body(raw._s3)

        return sync(raw.loop, main)

    def _network_errors(self) -> tuple[type[BaseException], ...]:
        """Failures of a request besides botocore's and OSError: aiohttp's under s3fs."""
        if self.light:
            return (asyncio.TimeoutError,)
        import aiohttp

        return (aiohttp.ClientError, asyncio.TimeoutError)

    @staticmethod
    def _transient(exc: BaseException) -> tuple[bool, bool]:
        """(worth retrying, the store asked us to slow down) for a failed request."""
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            code, status = _client_error_code(exc)
            throttled = code in _THROTTLE_CODES or status in (429, 503)
            return throttled or code in _TRANSIENT_CODES or (status or 0) >= 500, throttled
        # Connection resets, timeouts, a server that went away for a moment.
        return True, False

    async def _request(
        self,
        client: Any,
        limit: AdaptiveLimit,
        policy: RequestPolicy,
        rng: random.Random,
        method: str,
        counter: list[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One S3 call through `limit`, retried with backoff while it fails transiently."""
        from botocore.exceptions import BotoCoreError, ClientError

        network = self._network_errors()
        for attempt in range(policy.attempts):
            await limit.acquire()
            counter[0] += 1
            try:
                result = await getattr(client, method)(**kwargs)
            except (ClientError, BotoCoreError, OSError, *network) as exc:
                retry, throttled = self._transient(exc)
                await limit.release(throttled=throttled)
                if not retry or attempt + 1 >= policy.attempts:
                    if isinstance(exc, (ClientError, BotoCoreError, OSError)):
                        raise
                    raise OSError(f"{type(exc).__name__}: {exc}") from exc
                await asyncio.sleep(policy.delay(attempt, rng))
                continue
            await limit.release(throttled=False)
            return result
        raise AssertionError("unreachable: the last attempt raises or returns")

    def list_subdir_ranges(
        self, native_dir: str, bounds: list[str], policy: RequestPolicy,
        remember: bool = False, exclude: Skip | None = None,
    ) -> list[str]:
        folders: list[str] = []
        self._remembered = None
        # The files come in the same pages as the subdirectories: none is held unless
        # remembered, and then at most REMEMBER_MAX_FILES of those `exclude` leaves.
        head, names = exclude if exclude is not None else ("", None)
        held = _AtMost(REMEMBER_MAX_FILES if remember else 0, names if remember else None)
        seen = [0, 0]

        def count(_pages: int, files: int, size: int) -> None:
            seen[0] += files
            seen[1] += size

        files = self.list_ranges([(native_dir, bounds, False)], policy, count, folders,
                                 exclude=[(head, held)])[0]
        if remember and not held.over:
            # The same pages held the directory's files: the next `list_ranges` of it
            # that leaves out the same takes them from here instead of listing the
            # directory a second time.
            self._remembered = (native_dir, time.monotonic(), files, exclude, seen[0], seen[1])
        return sorted(set(folders))

    def _take_remembered(
        self, native_dir: str, skip: Skip | None
    ) -> tuple[list[tuple[str, int, int]], int, int] | None:
        """The files `list_subdir_ranges(remember=True)` listed in `native_dir` but those
        `skip` names, and the files and bytes it listed: once, only within
        `REMEMBER_SECONDS` with no write or delete through this backend since, and only
        when the files it left out (its own `exclude`) are those `skip` leaves out of the
        directory; None otherwise."""
        held = self._remembered
        self._remembered = None
        if held is None or held[0] != native_dir:
            return None
        if time.monotonic() - held[1] > REMEMBER_SECONDS:
            return None
        files, left_out = held[2], held[3]
        if left_out is None:
            return without(files, skip), held[4], held[5]
        same = getattr(left_out[1], "same_in", None)
        if skip is None or skip[0] != left_out[0] or same is None or not same(skip[1], skip[0]):
            return None
        return files, held[4], held[5]

    def list_ranges(
        self,
        specs: list[tuple[str, list[str], bool]],
        policy: RequestPolicy,
        progress: Progress | None,
        folders: list[str] | None = None,
        exclude: Sequence[Skip | None] | None = None,
        windows: Sequence[Window] | None = None,
    ) -> list[list[tuple[str, int, int]]]:
        rng = random.Random(policy.seed)
        counter = [0]
        outs: list[list[tuple[str, int, int]]] = [[] for _ in specs]
        self.longest_chain = 0

        async def one(client: Any, limit: AdaptiveLimit, bucket: str, prefix: str,
                      recursive: bool, after: str | None, stop: str | None,
                      out: list[tuple[str, int, int]], skip: Skip | None,
                      depth: int = 0) -> None:
            children: list[asyncio.Future[None]] = []
            try:
                await chain(client, limit, bucket, prefix, recursive, after, stop, out,
                            skip, depth, children)
            finally:
                if children:
                    await asyncio.gather(*children)

        async def chain(client: Any, limit: AdaptiveLimit, bucket: str, prefix: str,
                        recursive: bool, after: str | None, stop: str | None,
                        out: list[tuple[str, int, int]], skip: Skip | None, depth: int,
                        children: list[asyncio.Future[None]]) -> None:
            first_page = True
            pages = depth  # this chain's pages, after those its ancestors waited for
            # The range's own prefix (`range_prefix`): the same keys, and fewer for the
            # store to gather per page. Keys stay relative to the directory's `prefix`.
            kwargs: dict[str, Any] = {
                "Bucket": bucket, "Prefix": prefix + range_prefix(after, stop, recursive),
            }
            if not recursive:
                kwargs["Delimiter"] = "/"
            if after is not None:
                kwargs["StartAfter"] = prefix + after
            if self.page_size:
                kwargs["MaxKeys"] = self.page_size
            # The names to leave out that this range may meet (`sorted_paths.in_range`),
            # taken once its first page is here: the ranges waiting for theirs hold none.
            local_skip: Skip | None = None
            while True:
                page = _listing_page(await self._request(
                    client, limit, policy, rng, "list_objects_v2", counter, **kwargs
                ))
                if page.plain_unsafe:
                    # A name plain XML cannot carry: this page again, URL-encoded, and
                    # the rest of the range so too.
                    if kwargs.get("EncodingType") == "url":
                        raise ValueError(
                            f"S3 listing of s3://{bucket}/{kwargs['Prefix']}: the store "
                            "answered without the URL encoding asked for, with a name "
                            "that XML cannot carry intact; the listing is refused rather "
                            "than read under other names")
                    kwargs["EncodingType"] = "url"
                    continue
                pages += 1
                self.longest_chain = max(self.longest_chain, pages)
                cut = len(prefix)
                seen = [k[cut:] for k in page.keys]
                sizes, stamps = page.sizes, page.stamps
                past = False
                if stop is not None and seen and max(seen) > stop:
                    past = True
                    end = next(i for i, rel in enumerate(seen) if rel > stop)
                    seen, sizes, stamps = seen[:end], sizes[:end], stamps[:end]
                # Directory markers (and, without recursion, keys below a subdirectory)
                # are no files.
                triples = zip(seen, sizes, stamps, strict=True)
                entries = (
                    [e for e in triples if e[0] and e[0][-1] != "/"] if recursive
                    else [e for e in triples if e[0] and "/" not in e[0]]
                )
                files, size = len(entries), sum(e[1] for e in entries)
                if skip is not None and local_skip is None:
                    local_skip = (skip[0], in_range(skip[1], skip[0], after, stop, recursive))
                out.extend(without(entries, local_skip))
                commons = [c[cut:] for c in page.prefixes]
                if folders is not None:
                    # Subdirectories of this range (bounds of one directory's own names
                    # hold no '/', so a subdirectory never straddles two ranges).
                    for sub in commons:
                        if (after is None or sub > after) and (stop is None or sub <= stop):
                            if sub.rstrip("/"):
                                folders.append(sub.rstrip("/"))
                if stop is not None and not past:
                    # A page of only subdirectories (listing with a delimiter) may end the
                    # range as well.
                    if commons and commons[-1] > stop:
                        past = True
                if progress is not None:
                    progress(1, files, size)
                token = page.token
                if past or not page.truncated or not token:
                    return
                kwargs["ContinuationToken"] = token
                if first_page and depth < SPLIT_DEPTH and self.split_ranges:
                    # Still paging: cut the rest of the range, (end of this page, stop],
                    # into pieces listed side by side instead of page after page; this
                    # chain goes on to the first cut only.
                    ends = [*seen[-1:], *commons[-1:]]
                    if ends:
                        cuts = extrapolated_bounds(seen, max(ends), stop)
                        for lo, hi in zip(cuts, [*cuts[1:], stop], strict=False):
                            children.append(asyncio.ensure_future(one(
                                client, limit, bucket, prefix, recursive, lo, hi, out,
                                skip, depth + 1,
                            )))
                        if cuts:
                            stop = cuts[0]
                first_page = False

        done: set[int] = set()
        for i, (native_dir, _bounds, recursive) in enumerate(specs):
            held = self._remembered
            whole = windows is None or windows[i] == (None, None)
            if not recursive and whole and held is not None and held[0] == native_dir:
                taken = self._take_remembered(native_dir, exclude[i] if exclude else None)
                if taken is not None:
                    outs[i].extend(taken[0])
                    done.add(i)
                    if progress is not None:
                        progress(0, taken[1], taken[2])

        async def body(client: Any) -> None:
            limit = AdaptiveLimit(policy.concurrency)
            jobs = []
            for i, ((native_dir, bounds, recursive), out) in enumerate(
                zip(specs, outs, strict=True)
            ):
                if i in done:
                    continue
                bucket, key = self._split(native_dir)
                prefix = self._dir_prefix(key)
                skip = exclude[i] if exclude else None
                for after, stop in ranges_of(bounds, windows[i] if windows else (None, None)):
                    jobs.append(one(client, limit, bucket, prefix, recursive, after, stop, out,
                                    skip))
            await asyncio.gather(*jobs)

        if len(done) < len(specs):
            self._run(policy, body)
        return outs

    def delete_batches(
        self, natives: list[str], policy: RequestPolicy, progress: Progress | None
    ) -> DeleteReport:
        self._remembered = None
        self._sizes.clear()  # sizes remembered from listings: these keys go away
        by_bucket: dict[str, list[str]] = {}
        for native in natives:
            bucket, key = self._split(native)
            if key:
                by_bucket.setdefault(bucket, []).append(key)
        batches = [
            (bucket, keys[i : i + self.delete_batch])
            for bucket, all_keys in by_bucket.items()
            for keys in [sorted(set(all_keys))]
            for i in range(0, len(keys), self.delete_batch)
        ]
        rng = random.Random(policy.seed)
        counter = [0]
        deleted: list[int] = []
        failed: list[tuple[str, str]] = []

        network = self._network_errors()

        async def one(client: Any, limit: AdaptiveLimit, bucket: str, keys: list[str]) -> None:
            pending = keys
            reasons: dict[str, str] = {}
            done = 0
            for attempt in range(policy.attempts):
                try:
                    response = await self._request(
                        client, limit, policy, rng, "delete_objects", counter,
                        Bucket=bucket,
                        Delete={"Objects": [{"Key": k} for k in pending], "Quiet": False},
                    )
                except (*self.errors, *network) as exc:
                    code, status = _client_error_code(exc)
                    why = f"{code or type(exc).__name__} ({status}): {exc}" if status else str(exc)
                    reasons.update((k, why) for k in pending)
                    break
                asked = set(pending)
                confirmed = {d.get("Key") for d in response.get("Deleted", ())} & asked
                done += len(confirmed)
                retry: list[str] = []
                slow = False
                for err in response.get("Errors", ()):
                    k = err.get("Key")
                    if k not in asked:
                        continue
                    code = str(err.get("Code"))
                    reasons[k] = f"{code}: {err.get('Message')}"
                    if code in _THROTTLE_CODES or code in _TRANSIENT_CODES:
                        retry.append(k)
                        slow = slow or code in _THROTTLE_CODES
                        continue
                # Keys neither confirmed nor refused are asked again too.
                answered = confirmed | {e.get("Key") for e in response.get("Errors", ())}
                retry += [k for k in pending if k not in answered]
                for k in confirmed:
                    reasons.pop(k, None)
                if progress is not None:
                    progress(1, len(confirmed), 0)
                pending = sorted(set(retry))
                if not pending:
                    break
                if slow:
                    await limit.acquire()
                    await limit.release(throttled=True)
                if attempt + 1 < policy.attempts:
                    await asyncio.sleep(policy.delay(attempt, rng))
            deleted.append(done)
            failed.extend(
                (f"{bucket}/{k}", reasons.get(k, "not confirmed by the store")) for k in pending
            )

        async def body(client: Any) -> None:
            limit = AdaptiveLimit(policy.concurrency)
            await asyncio.gather(*(one(client, limit, b, keys) for b, keys in batches))

        if batches:
            self._run(policy, body)
        return DeleteReport(sum(deleted), tuple(sorted(failed)), counter[0])

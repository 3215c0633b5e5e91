"""How an S3 ListObjectsV2 answer is taken: botocore keeps the answer's bytes
(`hook_listing`, which also replaces botocore's whole-document error check by a check of
the document's first and last bytes), and `_listing_page` reads the page from them with a
few regular expressions instead of an XML tree. Used by `s3_bulk`'s listings at the
request limit. No section of the Delta protocol is implemented here (storage only).
"""

from __future__ import annotations

import re
from typing import Any

from delta_ops.storage.backend import _ms

_RAW_XML = "DeltaOpsListingXml"
#: The start of a ListObjectsV2 answer: an optional XML declaration, then the root element.
_LISTING_START = re.compile(rb"\s*(?:<\?xml[^>]*\?>\s*)?<ListBucketResult[\s>]")


def _keep_listing_xml(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                      **_: Any) -> None:
    """botocore hook (``before-parse``): keep a successful ListObjectsV2 answer's XML for
    `_listing_page` and hand botocore an empty result to parse. botocore's parser spends
    about 0.5 ms a key (a page of 1,000: half a second of CPU, more than the round trip);
    `_listing_page` reads the same XML in a few ms.

    A 200 answer that is not one whole ListBucketResult document (an error document sent
    with status 200, or a body cut short) gets status 500, as botocore's own check of S3's
    200 answers does (`hook_listing`): the request then fails as a server error and is
    retried."""
    body = response_dict.get("body")
    if (response_dict.get("status_code") != 200 or not isinstance(body, bytes)
            or _RAW_XML in customized_response_dict):
        return
    if _LISTING_START.match(body) is None or not body.rstrip().endswith(b"</ListBucketResult>"):
        response_dict["status_code"] = 500
        return
    customized_response_dict[_RAW_XML] = body
    response_dict["body"] = b"<ListBucketResult/>"


def hook_listing(events: Any) -> None:
    """Have the ListObjectsV2 answers of the botocore client whose event system is `events`
    read by `_listing_page`.

    botocore checks every 200 answer of S3 for an error document inside it
    (`botocore.handlers._handle_200_error`, on ``before-parse.s3.*``, run before any
    handler of a single operation). It parses the whole answer into an XML tree to read its
    root tag: for a VACUUM listing 275,000 keys that was 3.7 of its 10.5 s of CPU. Here
    that check is kept for every operation but ListObjectsV2, whose answers
    `_keep_listing_xml` checks from the document's first and last bytes. Where botocore
    has no such function, its checks stay as they are.
    """
    from botocore import handlers

    check = getattr(handlers, "_handle_200_error", None)
    if check is not None:
        events.unregister("before-parse.s3.*", check)

        def unless_listing(operation_model: Any, **kwargs: Any) -> None:
            if operation_model.name != "ListObjectsV2":
                check(operation_model=operation_model, **kwargs)

        events.register_first("before-parse.s3.*", unless_listing,
                              unique_id="delta_ops.s3_200_check")
    # Once per client, whatever the calls: a second `_keep_listing_xml` would keep the
    # empty document the first one left.
    events.register("before-parse.s3.ListObjectsV2", _keep_listing_xml,
                    unique_id="delta_ops.keep_listing_xml")


_CONTENTS = re.compile(rb"<Contents>(.*?)</Contents>", re.S)
_COMMON = re.compile(rb"<CommonPrefixes>\s*<Prefix>(.*?)</Prefix>", re.S)
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)
_SIZE = re.compile(rb"<Size>(.*?)</Size>", re.S)
_STAMP = re.compile(rb"<LastModified>(.*?)</LastModified>", re.S)
_TRUNCATED = re.compile(rb"<IsTruncated>(.*?)</IsTruncated>", re.S)
_TOKEN = re.compile(rb"<NextContinuationToken>(.*?)</NextContinuationToken>", re.S)
_ENCODING = re.compile(rb"<EncodingType>(.*?)</EncodingType>", re.S)


#: The tags that place an entry's fields, and their order in S3's (and moto's) answers.
_ENTRY_TAGS = re.compile(rb"<(Contents|Key|LastModified|Size)>")
_ENTRY_ORDER = b"ContentsKeyLastModifiedSize"


def _entries(raw: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(Key, Size, LastModified) of each `<Contents>` entry of a listing page, in order.

    When the page's tags run Contents, Key, LastModified, Size for every entry (S3's order),
    three searches of the whole page line up, entry by entry. Otherwise each entry is
    searched on its own. A value holding markup (a document whose element did not close)
    fails the page: a key or a time taken from the wrong entry could make a new file look
    old to VACUUM.
    """
    keys, sizes, stamps = _KEY.findall(raw), _SIZE.findall(raw), _STAMP.findall(raw)
    if not (len(keys) == len(sizes) == len(stamps)
            and b"".join(_ENTRY_TAGS.findall(raw)) == _ENTRY_ORDER * len(keys)):
        keys, sizes, stamps = [], [], []
        for block in _CONTENTS.findall(raw):
            k, size, stamp = _KEY.search(block), _SIZE.search(block), _STAMP.search(block)
            if k is None or size is None or stamp is None:
                raise ValueError(
                    f"S3 listing entry without Key, Size or LastModified: {block!r}")
            keys.append(k.group(1))
            sizes.append(size.group(1))
            stamps.append(stamp.group(1))
    out = list(zip(keys, sizes, stamps, strict=True))
    if any(b"<" in b"".join(column) for column in (keys, sizes, stamps)):
        bad = next(entry for entry in out if any(b"<" in v for v in entry))
        raise ValueError(f"S3 listing entry with markup in a value: {bad!r}")
    return out


def _listing_page(parsed: dict[str, Any]) -> dict[str, Any]:
    """A ListObjectsV2 page as botocore gives it (Contents with Key, Size and
    LastModified in ms since the epoch; CommonPrefixes; IsTruncated;
    NextContinuationToken), from the XML `_keep_listing_xml` kept.

    The elements of an S3 listing are flat and never nest a tag of their own name, so
    each is found by a regular expression (C speed: a few ms a page, where a tree of the
    page costs tens); text is XML-unescaped and, with ``EncodingType=url``, URL-decoded
    (strictly as UTF-8: a key that does not decode fails the listing rather than being
    listed under another name)."""
    raw = parsed.get(_RAW_XML)
    if raw is None:  # not kept (another hook consumed it): botocore's own parse
        return {**parsed, "Contents": [
            {**c, "LastModified": _ms(c["LastModified"].timestamp())}
            for c in parsed.get("Contents", ())
        ]}
    from datetime import datetime
    from html import unescape
    from urllib.parse import unquote_to_bytes

    found = _ENCODING.search(raw)
    encoded = found is not None and found.group(1) == b"url"

    def text(value: bytes) -> str:
        out = value.decode("utf-8")
        return unescape(out) if "&" in out else out

    def key(value: bytes) -> str:
        if b"&" in value:
            value = unescape(value.decode("utf-8")).encode("utf-8")
        if encoded and (b"%" in value or b"+" in value):
            return unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        return value.decode("utf-8")

    stamps: dict[bytes, int] = {}  # objects written together share their LastModified
    contents = []
    for k, size, stamp in _entries(raw):
        when = stamps.get(stamp)
        if when is None:
            iso = stamp.decode("ascii").replace("Z", "+00:00")
            when = stamps[stamp] = _ms(datetime.fromisoformat(iso).timestamp())
        contents.append({"Key": key(k), "Size": int(size), "LastModified": when})
    truncated = _TRUNCATED.search(raw)
    page: dict[str, Any] = {
        "Contents": contents,
        "CommonPrefixes": [{"Prefix": key(p)} for p in _COMMON.findall(raw)],
        "IsTruncated": truncated is not None and truncated.group(1) == b"true",
    }
    token = _TOKEN.search(raw)
    if token is not None and token.group(1):
        page["NextContinuationToken"] = text(token.group(1))
    return page

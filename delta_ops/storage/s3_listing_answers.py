"""How an S3 ListObjectsV2 answer is taken: botocore keeps the answer's bytes
(`hook_listing`, which also replaces botocore's whole-document error check by a check of
the document's first and last bytes), and `_listing_page` reads the page from them with a
few regular expressions instead of an XML tree, by column (`ListingPage`), with the keys
of a page decoded together. Those listings ask for plain names, not URL-encoded ones
(botocore's default): a page holding a name that plain XML cannot carry intact comes back
flagged (`ListingPage.plain_unsafe`) and is asked for again, encoded. Used by `s3_bulk`'s
listings at the request limit. No section of the Delta protocol is implemented here
(storage only).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

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
    # The listings ask for plain names (`ListingPage.plain_unsafe` tells when a page
    # must be asked for again, URL-encoded): botocore asks every listing for URL-encoded
    # names, which costs the store and this client a decode of nearly every key of a
    # partitioned table ('=').
    encode = getattr(handlers, "set_list_objects_encoding_type_url", None)
    if encode is not None:
        events.unregister("before-parameter-build.s3.ListObjectsV2", encode)
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

#: One whole `<Contents>` element as S3 (and moto) write it: Key, LastModified, then
#: Size, with only flat elements (ETag, checksums, StorageClass) between and after; no
#: value holds markup. Group 1 is the key, 2 the time, 4 the size.
_ENTRY = re.compile(
    rb"<Contents>\s*<Key>([^<]*)</Key>\s*<LastModified>([^<]*)</LastModified>"
    rb"(?:\s*<([A-Za-z]+)>[^<]*</\3>)*?\s*<Size>([^<]*)</Size>"
    rb"(?:\s*<([A-Za-z]+)>[^<]*</\5>)*\s*</Contents>"
)
#: A URL escape, as ``EncodingType=url`` writes one.
_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}")
#: Control characters: XML 1.0 cannot carry most of them, and a reader turns a carriage
#: return into a line feed.
_CONTROL = bytes(range(0x20)) + b"\x7f"
#: An entity other than the five XML predefines (a character reference, such as a store's
#: ``&#x1;``, whose meaning a reader may change).
_ODD_ENTITY = re.compile(rb"&(?!(?:amp|lt|gt|quot|apos);)")


def _plain_unsafe(names: bytes) -> bool:
    """Whether `names`, from a page without URL encoding, hold a control character or an
    entity but the five XML predefines: names only an encoded page carries safely."""
    if len(names.translate(None, _CONTROL)) != len(names):
        return True
    return b"&" in names and _ODD_ENTITY.search(names) is not None


class ListingPage(NamedTuple):
    """One ListObjectsV2 page, by column: the keys (decoded), their sizes and their
    LastModified in ms since the epoch (in the page's order), the common prefixes, whether
    the listing goes on, and the token of its next page."""

    keys: list[str]
    sizes: list[int]
    stamps: list[int]
    prefixes: list[str]
    truncated: bool
    token: str | None
    #: The page came without URL encoding and holds a name that only an encoded page
    #: carries safely (`_plain_unsafe`): it is not read (no keys), and must be asked for
    #: again with ``EncodingType=url``.
    plain_unsafe: bool = False


def _entries(raw: bytes) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(keys, sizes, LastModified) of the `<Contents>` entries of a listing page, in order,
    still encoded.

    When every entry is one whole element of S3's shape (`_ENTRY`: as many matches as
    `<Contents>` tags), one search of the page reads them all; each match spans exactly
    one element, so no field can be taken from another entry. Otherwise each entry is
    searched on its own. A value holding markup (a document whose element did not close)
    fails the page: a key or a time taken from the wrong entry could make a new file look
    old to VACUUM.
    """
    found = _ENTRY.findall(raw)
    if len(found) == raw.count(b"<Contents>"):
        if not found:
            return [], [], []
        keys, stamps, _, sizes, _ = (list(column) for column in zip(*found, strict=True))
        return keys, sizes, stamps
    keys, sizes, stamps = [], [], []
    for block in _CONTENTS.findall(raw):
        k, size, stamp = _KEY.search(block), _SIZE.search(block), _STAMP.search(block)
        if k is None or size is None or stamp is None:
            raise ValueError(
                f"S3 listing entry without Key, Size or LastModified: {block!r}")
        entry = (k.group(1), size.group(1), stamp.group(1))
        if any(b"<" in v for v in entry):
            raise ValueError(f"S3 listing entry with markup in a value: {entry!r}")
        keys.append(entry[0])
        sizes.append(entry[1])
        stamps.append(entry[2])
    return keys, sizes, stamps


def _key(value: bytes, encoded: bool) -> str:
    """One key or prefix: XML-unescaped, then URL-decoded when the page is `encoded`
    (strictly as UTF-8: a key that does not decode fails the listing rather than being
    listed under another name)."""
    from urllib.parse import unquote_to_bytes

    if b"&" in value:
        from html import unescape

        value = unescape(value.decode("utf-8")).encode("utf-8")
    if encoded and (b"%" in value or b"+" in value):
        return unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
    return value.decode("utf-8")


def _keys(values: list[bytes], encoded: bool) -> list[str]:
    """`_key` of each of `values`, decoded together: joined by ``<`` (which no value
    holds, `_entries`), every distinct escape replaced across the whole page at once
    (``%25``, the only one that yields a ``%``, last, so no replacement makes a new
    escape), then split again. A page where this could differ from `_key` one by one (an
    XML entity, a ``%`` that starts no escape, an escaped ``<``) is decoded one by one."""
    joined = b"<".join(values)
    if b"&" in joined:
        return [_key(v, encoded) for v in values]
    if encoded:
        found = _ESCAPE.findall(joined)
        escapes = set(found)
        if joined.count(b"%") != len(found) or not escapes.isdisjoint((b"%3C", b"%3c")):
            return [_key(v, encoded) for v in values]
        joined = joined.replace(b"+", b" ")
        for escape in sorted(escapes, key=lambda e: (e.upper() == b"%25", e)):
            joined = joined.replace(escape, bytes((int(escape[1:], 16),)))
    out = joined.decode("utf-8").split("<")
    return out if values else []


def _listing_page(parsed: dict[str, Any]) -> ListingPage:
    """A ListObjectsV2 page (`ListingPage`) from the XML `_keep_listing_xml` kept, or from
    botocore's own parse when no XML was kept.

    The elements of an S3 listing are flat and never nest a tag of their own name, so
    each is found by a regular expression (C speed: a few ms a page, where a tree of the
    page costs tens); text is XML-unescaped and, with ``EncodingType=url``, URL-decoded
    (`_keys`)."""
    raw = parsed.get(_RAW_XML)
    if raw is None:  # not kept (another hook consumed it): botocore's own parse
        contents = parsed.get("Contents", ())
        return ListingPage(
            [c["Key"] for c in contents], [int(c["Size"]) for c in contents],
            [_ms(c["LastModified"].timestamp()) for c in contents],
            [p["Prefix"] for p in parsed.get("CommonPrefixes", ())],
            bool(parsed.get("IsTruncated")), parsed.get("NextContinuationToken") or None,
        )
    from datetime import datetime
    from html import unescape

    found = _ENCODING.search(raw)
    encoded = found is not None and found.group(1) == b"url"
    keys, sizes, stamps = _entries(raw)
    commons = _COMMON.findall(raw)
    if not encoded and _plain_unsafe(b"<".join([*keys, *commons])):
        return ListingPage([], [], [], [], False, None, plain_unsafe=True)
    when: dict[bytes, int] = {}  # objects written together share their LastModified
    for stamp in set(stamps):
        iso = stamp.decode("ascii").replace("Z", "+00:00")
        when[stamp] = _ms(datetime.fromisoformat(iso).timestamp())
    truncated = _TRUNCATED.search(raw)
    token = _TOKEN.search(raw)
    text = token.group(1).decode("utf-8") if token is not None else ""
    return ListingPage(
        _keys(keys, encoded), list(map(int, sizes)), [when[s] for s in stamps],
        [_key(p, encoded) for p in commons],
        truncated is not None and truncated.group(1) == b"true",
        (unescape(text) if "&" in text else text) or None,
    )

"""How a ListObjectsV2 answer is taken (`storage.s3_listing_answers.hook_listing`): only a whole
ListBucketResult document is read, anything else sent with status 200 becomes a server
error (retried, never a shorter listing), and botocore's own check of S3's 200 answers, which
parses every answer into a tree, still runs for every other operation. Pages are read by
column, their keys decoded together, and asked for plain unless a name needs encoding."""

from __future__ import annotations

import re
import urllib.parse

import botocore.handlers
import botocore.session
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from delta_ops.storage import Storage
from delta_ops.storage.s3_listing_answers import (
    _ENTRY,
    _RAW_XML,
    _entries,
    _keep_listing_xml,
    _key,
    _listing_page,
    _plain_unsafe,
    hook_listing,
)
from delta_ops_tests.support.s3_keys import storage_holding
from delta_ops_tests.support.s3_proxy import S3Proxy

PAGE = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>b</Name><Prefix>t/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
        b"<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
        b"<Contents><Key>t/a%3D1/x.parquet</Key><LastModified>2023-01-01T00:00:00.000Z"
        b"</LastModified><ETag>&quot;e&quot;</ETag><Size>5</Size>"
        b"<StorageClass>STANDARD</StorageClass></Contents>"
        b"<Contents><Key>t/b+c.parquet</Key><LastModified>2023-01-01T00:00:01.000Z"
        b"</LastModified><ETag>&quot;f&quot;</ETag><Size>7</Size>"
        b"<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>\n")
ERROR = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
         b"<Message>We encountered an internal error.</Message></Error>")


def _kept(body: bytes, status: int = 200) -> tuple[int, dict]:
    response = {"status_code": status, "body": body, "headers": {}}
    custom: dict = {}
    _keep_listing_xml(response_dict=response, customized_response_dict=custom)
    return response["status_code"], custom


def test_a_whole_listing_document_is_kept_and_read():
    status, custom = _kept(PAGE)
    assert status == 200 and custom[_RAW_XML] == PAGE
    page = _listing_page(custom)
    assert list(zip(page.keys, page.sizes, strict=True)) == [
        ("t/a=1/x.parquet", 5), ("t/b c.parquet", 7)]
    assert page.stamps[1] - page.stamps[0] == 1000
    assert page.truncated is False and page.token is None and page.prefixes == []


@pytest.mark.parametrize("body", [
    PAGE[:PAGE.index(b"<Contents>", 300)],  # cut between two entries
    PAGE[:-40],  # cut inside the last entry
    ERROR,  # an error document sent with 200
    b"",
], ids=["cut-between-entries", "cut-inside-an-entry", "error-document", "empty"])
def test_anything_else_sent_with_200_becomes_a_server_error(body):
    status, custom = _kept(body)
    assert status == 500 and _RAW_XML not in custom


def test_an_error_status_is_left_to_botocore():
    status, custom = _kept(ERROR, status=503)
    assert status == 503 and custom == {}


def test_botocore_still_checks_the_200_answers_of_other_operations(monkeypatch):
    parsed_trees: list[bytes] = []
    real = botocore.handlers._looks_like_special_case_error

    def counting(status_code, body):
        parsed_trees.append(body)
        return real(status_code, body)

    monkeypatch.setattr(botocore.handlers, "_looks_like_special_case_error", counting)
    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    hook_listing(client.meta.events)
    hook_listing(client.meta.events)  # hooking twice changes nothing
    model = client.meta.service_model

    def emit(operation: str, body: bytes) -> tuple[int, dict]:
        response = {"status_code": 200, "body": body, "headers": {}}
        custom: dict = {}
        client.meta.events.emit(
            f"before-parse.s3.{operation}", operation_model=model.operation_model(operation),
            response_dict=response, customized_response_dict=custom)
        return response["status_code"], custom

    status, custom = emit("ListObjectsV2", PAGE)
    assert status == 200 and custom[_RAW_XML] == PAGE and parsed_trees == []
    assert emit("ListObjectsV2", ERROR)[0] == 500 and parsed_trees == []
    # CopyObject answers 200 with an error document when the copy fails midway.
    assert emit("CopyObject", ERROR)[0] == 500 and parsed_trees == [ERROR]

    # The hooked client asks for plain names; another client of the session still asks
    # for URL-encoded ones (botocore's default).
    def listing_params(c) -> dict:
        params: dict = {"Bucket": "b"}
        c.meta.events.emit("before-parameter-build.s3.ListObjectsV2", params=params,
                           model=model.operation_model("ListObjectsV2"), context={})
        return params

    other = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    assert "EncodingType" not in listing_params(client)
    assert listing_params(other)["EncodingType"] == "url"


def test_entries_in_another_element_order_read_the_same():
    # Each entry's LastModified moved after its Size: the page is read entry by entry.
    swapped = re.sub(rb"(<LastModified>.*?</LastModified>)(.*?)(<Size>.*?</Size>)",
                     rb"\2\3\1", PAGE)
    assert swapped.index(b"<Size>5") < swapped.index(b"00:00.000Z")
    assert _listing_page({_RAW_XML: swapped}) == _listing_page({_RAW_XML: PAGE})


@pytest.mark.parametrize("broken", [
    # The first entry without its size, the second with two: as many sizes as entries.
    PAGE.replace(b"<Size>5</Size>", b"").replace(b"<Size>7</Size>",
                                                 b"<Size>7</Size><Size>9</Size>"),
    # A key that does not close.
    PAGE.replace(b"x.parquet</Key>", b"x.parquet"),
], ids=["sizes-shifted", "key-not-closed"])
def test_an_entry_that_could_be_read_against_another_fails_the_page(broken):
    with pytest.raises(ValueError, match="S3 listing entry"):
        _listing_page({_RAW_XML: broken})


def _page_of(keys: list[bytes], encoded: bool) -> bytes:
    entries = b"".join(
        b"<Contents><Key>" + k + b"</Key><LastModified>2023-01-01T00:00:0"
        + str(i % 10).encode() + b".000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>"
        + str(i).encode() + b"</Size><StorageClass>STANDARD</StorageClass></Contents>"
        for i, k in enumerate(keys))
    return (b'<?xml version="1.0" encoding="UTF-8"?>\n'
            b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Name>b</Name><Prefix>t/</Prefix>"
            + (b"<EncodingType>url</EncodingType>" if encoded else b"")
            + b"<IsTruncated>true</IsTruncated>" + entries
            + b"<NextContinuationToken>1&amp;2</NextContinuationToken></ListBucketResult>")


# Keys as a store writes them into a page: URL escapes (valid, invalid, of '%', '<', '+'
# and of multi-byte characters), XML entities, and plain text.
_KEY_PARTS = st.sampled_from([
    b"a", b"=", b"/", b"+", b" ", b"%3D", b"%3d", b"%2F", b"%25", b"%2541", b"%3C", b"%3c",
    b"%2B", b"%C3%A9", b"%E2%82%AC", b"%", b"%4", b"%zz", b"&amp;", b"&lt;", b"&#38;",
    b"\xc3\xa9", b"p%3D1", b"%%41", b"%41", b"%34", b"1",
])


@settings(max_examples=300, deadline=None)
# Pages where decoding the escapes of all keys at once, in any order, would go wrong.
@example([b"%%341", b"%41"], True)  # a lone '%' before an escape that decodes to a digit
@example([b"%2541", b"%41"], True)  # an escaped '%' before hex digits
@example([b"a%3Cb", b"c"], True)  # an escaped '<' (the separator)
@example([b"&lt;%3D", b"d"], True)  # an entity
@given(st.lists(st.lists(_KEY_PARTS, max_size=6).map(b"".join), max_size=12), st.booleans())
def test_a_page_decoded_at_once_reads_as_its_keys_one_by_one(keys, encoded):
    def one_by_one(value: bytes) -> str | type[Exception]:
        try:
            return _key(value, encoded)
        except UnicodeDecodeError:
            return UnicodeDecodeError

    raw = _page_of(keys, encoded)
    if not encoded and any(_plain_unsafe(k) for k in keys):
        assert _listing_page({_RAW_XML: raw}).plain_unsafe  # asked for again, encoded
        return
    expected = [one_by_one(k) for k in keys]
    if UnicodeDecodeError in expected:
        with pytest.raises(UnicodeDecodeError):
            _listing_page({_RAW_XML: raw})
        return
    page = _listing_page({_RAW_XML: raw})
    assert page.keys == expected
    assert page.sizes == list(range(len(keys)))
    assert [s - page.stamps[0] for s in page.stamps[:10]] == [
        i * 1000 for i in range(min(len(keys), 10))]
    assert page.truncated is True and page.token == "1&2"
    # Space between the elements reads the same.
    looser = raw.replace(b"<Contents>", b"<Contents> ").replace(b"</Key>", b"</Key>\n")
    assert _entries(looser) == _entries(raw)
    # Entries with a nested element are read entry by entry, alike.
    spread = raw.replace(b"<StorageClass>STANDARD</StorageClass>",
                         b"<Owner><ID>o</ID></Owner>")
    assert len(_ENTRY.findall(spread)) == 0
    assert _listing_page({_RAW_XML: spread}) == page


@pytest.mark.parametrize("name", [b"a\rb", b"a\nb", b"a\tb", b"a\x01b", b"a&#x1;b",
                                  b"a&#13;b", b"a&copy;b"])
def test_a_plain_page_with_a_name_xml_cannot_carry_is_not_read(name):
    page = _listing_page({_RAW_XML: _page_of([b"ok", name], encoded=False)})
    assert page.plain_unsafe and page.keys == [] and page.token is None
    # Encoded, the same name is read (its bytes escaped as the store escapes them).
    escaped = b"".join(b"%%%02X" % c if c < 0x20 or c in b"&#;%" else bytes((c,))
                       for c in name)
    encoded = _listing_page({_RAW_XML: _page_of([b"ok", escaped], encoded=True)})
    assert not encoded.plain_unsafe and encoded.keys == ["ok", name.decode()]


def test_a_plain_page_with_the_predefined_entities_is_read():
    page = _listing_page({_RAW_XML: _page_of([b"a&amp;b&lt;c&gt;d&quot;e&apos;f", b"p=1"],
                                             encoded=False)})
    assert not page.plain_unsafe and page.keys == ["a&b<c>d\"e'f", "p=1"]


@pytest.mark.s3
@pytest.mark.parametrize("recursive", [True, False])
def test_names_come_plain_unless_a_page_needs_them_encoded(s3_server, recursive):
    """Listings ask for plain names (no URL encoding for the store to write and this
    client to undo); a page holding a name XML cannot carry intact is asked for again,
    encoded, and so is the rest of its range. A store that answers that again without
    the encoding fails the listing, naming it."""
    plain = ["a=1.parquet", "b&c<d>.parquet", "p/x.parquet", "q/y.parquet"]
    awkward = ["q/c\rd.parquet", "q/e\x01f.parquet", "r\tx.parquet", "s\x1fy.parquet"]
    bounds = ["p", "q"]

    def listed(storage: Storage, **proxy_args: object) -> tuple[list, list[dict]]:
        with S3Proxy(s3_server.endpoint_url, latency=0.0, **proxy_args) as proxy:
            proxied = Storage.for_uri(storage.root, proxy.storage_options())
            got = proxied.list_ranges("", bounds, recursive=recursive)
            return got, [urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
                         for kind, path in proxy.requests if kind == "LIST"]

    for names in (plain, plain + awkward):
        storage = storage_holding(s3_server, "plainnames", names)
        serial = sorted(storage.walk("") if recursive else storage.list_dir(""),
                        key=lambda f: f.path)
        got, asked = listed(storage)
        assert got == serial
        encoded = [q for q in asked if q.pop("encoding-type", None) == ["url"]]
        if names == plain:
            assert encoded == [] and len(asked) == 3  # one plain page for each range
        else:
            assert {"r\tx.parquet", "s\x1fy.parquet"} <= {f.path for f in serial}
            # Each page holding an awkward name was asked for plain first, then encoded.
            assert encoded and all(asked.count(q) == 2 for q in encoded)
            with pytest.raises(ValueError, match="without the URL encoding asked for"):
                listed(storage, ignore=("encoding-type",))

"""How a ListObjectsV2 answer is taken (`storage.s3_listing_answers.hook_listing`): only a whole
ListBucketResult document is read, anything else sent with status 200 becomes a server
error (retried, never a shorter listing), and botocore's own check of S3's 200 answers, which
parses every answer into a tree, still runs for every other operation."""

from __future__ import annotations

import re

import botocore.handlers
import botocore.session
import pytest

from delta_ops.storage.s3_listing_answers import (
    _RAW_XML,
    _keep_listing_xml,
    _listing_page,
    hook_listing,
)

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
    assert [(c["Key"], c["Size"]) for c in page["Contents"]] == [
        ("t/a=1/x.parquet", 5), ("t/b c.parquet", 7)]
    assert page["Contents"][1]["LastModified"] - page["Contents"][0]["LastModified"] == 1000
    assert page["IsTruncated"] is False


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

"""The S3 clients parse timestamps with a fast path (`datetime.fromisoformat`) that gives
exactly botocore's value: on every spelling S3 and compatible stores send, and on a real
listing from the moto server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from botocore.utils import parse_timestamp
from hypothesis import given
from hypothesis import strategies as st

from delta_ops.storage import Storage
from delta_ops.storage.s3 import _timestamp

_ZONES = st.sampled_from([timezone.utc, timezone(timedelta(hours=2)),
                          timezone(timedelta(hours=-5, minutes=-30))])


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)), _ZONES,
       st.sampled_from(["iso-z", "iso-offset", "iso-millis-z", "http", "epoch"]))
def test_the_fast_parser_gives_botocores_value(moment, zone, spelling):
    moment = moment.replace(tzinfo=zone)
    utc = moment.astimezone(timezone.utc)
    text = {
        "iso-z": utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "iso-offset": moment.isoformat(),
        "iso-millis-z": utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z",
        "http": utc.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "epoch": str(int(utc.timestamp())),
    }[spelling]
    ours, theirs = _timestamp(text), parse_timestamp(text)
    assert ours == theirs
    assert ours.tzinfo is not None
    assert ours.timestamp() == theirs.timestamp()


def test_a_time_without_zone_goes_to_botocore():
    assert _timestamp("2026-11-20T10:11:12") == parse_timestamp("2026-11-20T10:11:12")
    assert _timestamp(1_700_000_000) == parse_timestamp(1_700_000_000)


@pytest.mark.s3
def test_a_listing_gives_the_stores_modification_times(s3_server):
    uri = s3_server.fresh_uri("ts")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    for i in range(5):
        storage.put_if_absent(f"_delta_log/{i:020d}.json", b"{}")
    listed = storage.list_dir("_delta_log")
    client = s3_server.client()
    prefix = uri.split("/", 3)[3]
    truth = {
        obj["Key"].rsplit("/", 1)[1]: int(obj["LastModified"].timestamp() * 1000)
        for obj in client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)["Contents"]
    }
    assert {i.path.rsplit("/", 1)[1]: i.modification_time for i in listed} == truth
    factory = storage._backend.fs.session.get_component("response_parser_factory")
    assert factory._defaults["timestamp_parser"] is _timestamp

"""``fencelock.fences.s3`` against a real S3-compatible server (moto's server mode), with a
boto3 client: the store's own conditional writes, then the fenced put on top of them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

import fencelock
from fencelock import fences
from fencelock_tools.servers.s3 import S3Server

_buckets = itertools.count()


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[Any]:
    client = boto3.client("s3", **s3_server.client_options())
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"fences-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    return name


def code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def test_the_server_honours_if_match_and_if_none_match_on_put(s3: Any, bucket: str) -> None:
    """What the fence rests on (docs/fencing.md says which headers this server honours)."""
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert code(refused.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="k", Body=b"3", IfMatch='"not-its-etag"')
    assert code(refused.value) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="k", Body=b"4", IfMatch=first["ETag"])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"4"


def test_a_newer_token_writes_and_an_older_one_is_refused(s3: Any, bucket: str) -> None:
    assert fences.s3.token(s3, bucket, "report") is None
    fences.s3.put_object(s3, bucket, "report", b"seven", token=7, ContentType="text/plain")
    fences.s3.put_object(s3, bucket, "report", b"seven again", token=7, metadata={"by": "b"})
    with pytest.raises(fencelock.StaleToken) as refused:
        fences.s3.put_object(s3, bucket, "report", b"six", token=6)
    assert (refused.value.key, refused.value.token, refused.value.seen) == (
        f"{bucket}/report",
        6,
        7,
    )
    stored = s3.get_object(Bucket=bucket, Key="report")
    assert stored["Body"].read() == b"seven again"
    assert stored["Metadata"] == {"by": "b", "fencelock-token": "7"}
    assert fences.s3.token(s3, bucket, "report") == 7


def test_an_object_written_without_a_token_is_replaced_by_the_first_fenced_write(
    s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="plain", Body=b"unfenced")
    assert fences.s3.token(s3, bucket, "plain") is None
    fences.s3.put_object(s3, bucket, "plain", b"fenced", token=1)
    assert fences.s3.token(s3, bucket, "plain") == 1


def test_a_write_that_lands_between_the_read_and_the_put_is_read_again(
    s3: Any, s3_server: S3Server, bucket: str
) -> None:
    """The race the condition closes: a newer holder writes between this put's HEAD and its
    PUT. The conditional PUT fails (412), the put reads again, finds the newer token: refused."""
    fences.s3.put_object(s3, bucket, "race", b"one", token=1)
    other = boto3.client("s3", **s3_server.client_options())

    def newer_writes_first(**kwargs: Any) -> None:
        if kwargs["params"].get("Body") == b"two":  # (only the put under test)
            fences.s3.put_object(other, bucket, "race", b"three", token=3)

    s3.meta.events.register_first("provide-client-params.s3.PutObject", newer_writes_first)
    try:
        with pytest.raises(fencelock.StaleToken) as refused:
            fences.s3.put_object(s3, bucket, "race", b"two", token=2)
    finally:
        s3.meta.events.unregister("provide-client-params.s3.PutObject", newer_writes_first)
        other.close()
    assert refused.value.seen == 3
    assert s3.get_object(Bucket=bucket, Key="race")["Body"].read() == b"three"


def test_a_race_lost_every_time_ends_in_too_many_conflicts_and_writes_nothing(
    s3: Any, s3_server: S3Server, bucket: str
) -> None:
    fences.s3.put_object(s3, bucket, "busy", b"one", token=1)
    other = boto3.client("s3", **s3_server.client_options())

    theirs = itertools.count()

    def unfenced_write_first(**kwargs: Any) -> None:
        if kwargs["params"].get("Body") == b"mine":  # (a new content each time: a new ETag)
            other.put_object(Bucket=bucket, Key="busy", Body=b"theirs %d" % next(theirs))

    s3.meta.events.register_first("provide-client-params.s3.PutObject", unfenced_write_first)
    try:
        with pytest.raises(fencelock.TooManyConflicts):
            fences.s3.put_object(s3, bucket, "busy", b"mine", token=2, tries=3)
    finally:
        s3.meta.events.unregister("provide-client-params.s3.PutObject", unfenced_write_first)
        other.close()
    assert s3.get_object(Bucket=bucket, Key="busy")["Body"].read() == b"theirs 2"


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("k", b"x"), {"token": 0}, ValueError),
        (("k", b"x"), {"token": -1}, ValueError),
        (("k", b"x"), {"token": 2**63}, ValueError),
        (("k", b"x"), {"token": "1"}, TypeError),
        (("k", "text"), {"token": 1}, TypeError),
        ((5, b"x"), {"token": 1}, TypeError),
        (("", b"x"), {"token": 1}, ValueError),
        (("k", b"x"), {"token": 1, "tries": 0}, ValueError),
        (("k", b"x"), {"token": 1, "IfMatch": "*"}, TypeError),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    s3: Any, bucket: str, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        fences.s3.put_object(s3, bucket, *args, **kwargs)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    with pytest.raises(TypeError, match="boto3 S3 client"):
        fences.s3.put_object(object(), bucket, "k", b"x", token=1)

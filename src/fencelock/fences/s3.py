"""Fencing for objects in S3-compatible stores, with a boto3 S3 client (docs/fencing.md, "S3").

``put_object(client, bucket, key, body, token=...)`` keeps the token in the object's metadata
(``x-amz-meta-fencelock-token``) and makes the write conditional on the object it read: it
reads the object's ETag and token (``HEAD``), refuses with ``StaleToken`` if the stored token is
larger, else writes with ``If-Match: <that ETag>`` (``If-None-Match: *`` where there was no
object). A write that lands in between fails the condition (412), and the put reads again:
retried while the stored token stays older, ``StaleToken`` once it is newer. So it holds on a
store that honours both conditional headers on PUT (moto's server does:
``tests/fences/test_s3.py``); on one that ignores them it does not, and docs/fencing.md says
how to check yours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._fencing import fencing_token, refused
from .._keys import nonempty_str
from ..errors import StaleToken, TooManyConflicts

__all__ = ["METADATA_KEY", "put_object", "token"]

METADATA_KEY = "fencelock-token"  # x-amz-meta-fencelock-token
_CONFLICTS = ("PreconditionFailed", "ConditionalRequestConflict")  # 412, 409: someone wrote
_ABSENT = ("404", "NoSuchKey", "NotFound")


def _client(client: object) -> Any:
    if not all(callable(getattr(client, name, None)) for name in ("head_object", "put_object")):
        raise TypeError(f"client must be a boto3 S3 client, not {type(client).__name__}")
    return client


def _head(client: Any, bucket: str, key: str) -> tuple[str | None, int | None]:
    """The object's ETag and stored token (None, None: no object; a token of None: an object
    written without one)."""
    from botocore.exceptions import ClientError  # (the client given imported it already)

    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _ABSENT:
            return None, None
        raise
    stored = head.get("Metadata", {}).get(METADATA_KEY)
    return head["ETag"], int(stored) if stored is not None and stored.isdigit() else None


def token(client: object, bucket: str, key: str) -> int | None:
    """The token stored with the object (None: no object, or one written without a token)."""
    bucket = nonempty_str("bucket", bucket)
    key = nonempty_str("key", key)
    return _head(_client(client), bucket, key)[1]


def put_object(
    client: object,
    bucket: str,
    key: str,
    body: bytes,
    *,
    token: int,
    metadata: Mapping[str, str] | None = None,
    tries: int = 10,
    **extra: Any,
) -> dict[str, Any]:
    """Write ``body`` to ``bucket``/``key`` if ``token`` is >= the token stored with the object
    (or there is none); ``StaleToken`` otherwise, writing nothing. Returns ``put_object``'s
    response. ``metadata`` is stored beside the token; ``extra`` goes to ``put_object`` as it
    is (``ContentType=...``). Each try is two requests (``HEAD``, then the conditional
    ``PUT``), each within the client's own timeouts; after ``tries`` writes that lost the race,
    ``TooManyConflicts`` (nothing was written by this call)."""
    s3 = _client(client)
    bucket = nonempty_str("bucket", bucket)
    key = nonempty_str("key", key)
    if not isinstance(body, bytes | bytearray | memoryview):  # (a stream could not be re-sent)
        raise TypeError(f"body must be bytes, not {type(body).__name__}")
    token = fencing_token(token)
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise ValueError(f"tries must be an int >= 1, got {tries!r}")
    taken = {"Bucket", "Key", "Body", "Metadata", "IfMatch", "IfNoneMatch"} & set(extra)
    if taken:
        raise TypeError(f"put_object sets {', '.join(sorted(taken))} itself")
    stored = {**(metadata or {}), METADATA_KEY: str(token)}
    from botocore.exceptions import ClientError

    for _ in range(tries):
        etag, seen = _head(s3, bucket, key)
        if seen is not None and seen > token:
            stale = StaleToken(f"{bucket}/{key}", token, seen)
            refused(stale)
            raise stale
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            response: dict[str, Any] = s3.put_object(
                Bucket=bucket, Key=key, Body=bytes(body), Metadata=stored, **condition, **extra
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _CONFLICTS:
                continue  # another write landed since the HEAD: read it
            raise
        return response
    raise TooManyConflicts(f"{bucket}/{key}", tries)

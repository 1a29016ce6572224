"""Store URLs are parsed once into a value, and what would silently point elsewhere is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dataprep.remote import RemoteConfig, RemoteConfigError, Scheme, StoreUrl, TransportMode, is_remote_url, parse_url


@pytest.mark.parametrize(("text", "scheme", "bucket", "prefix"), [
    ("s3://my-bucket/data/imagenet", Scheme.S3, "my-bucket", "data/imagenet"),
    ("s3://my-bucket/data/imagenet/", Scheme.S3, "my-bucket", "data/imagenet"),
    ("s3://my-bucket", Scheme.S3, "my-bucket", ""),
    ("S3://my-bucket/a", Scheme.S3, "my-bucket", "a"),
    ("gs://bucket.example/x/y", Scheme.GS, "bucket.example", "x/y"),
    ("az://container/p", Scheme.AZ, "container", "p"),
    ("s3://b-1/with%20space", Scheme.S3, "b-1", "with space"),
])
def test_remote_urls(text: str, scheme: Scheme, bucket: str, prefix: str) -> None:
    url = parse_url(text)
    assert (url.scheme, url.bucket, url.prefix) == (scheme, bucket, prefix)
    assert parse_url(str(url)) == url
    assert is_remote_url(text)
    assert not url.is_local


def test_local_paths_and_file_urls(tmp_path: Path) -> None:
    assert parse_url(tmp_path) == parse_url(f"file://{tmp_path}") == StoreUrl(Scheme.FILE, "", str(tmp_path))
    relative = parse_url("some/dir")
    assert relative.prefix == os.path.abspath("some/dir") and relative.is_local
    assert parse_url(tmp_path).local_path == tmp_path
    assert not is_remote_url(str(tmp_path)) and not is_remote_url(f"file://{tmp_path}")


def test_child_names_objects_under_the_prefix() -> None:
    url = parse_url("s3://bucket/data")
    assert str(url.child("shard-0.tar")) == "s3://bucket/data/shard-0.tar"
    assert url.key("a/b.idx") == "data/a/b.idx"
    assert parse_url("s3://bucket").key("m.json") == "m.json"
    assert str(parse_url("/tmp/x").child("y")) == "file:///tmp/x/y"


@pytest.mark.parametrize(("text", "expected"), [
    ("ftp://host/x", "unsupported scheme 'ftp'"),
    ("s3://Bad_Bucket/x", "not a bucket name"),
    ("s3:///x", "not a bucket name"),
    ("s3://bucket/a/../b", "'..' segments"),
    ("s3://bucket/a//b", "empty, '.' or '..'"),
    ("s3://bucket/x?versionId=1", "no query or fragment"),
    ("file://host/x", "local path"),
    ("file://relative", "local path"),
])
def test_bad_urls_are_refused_with_the_reason(text: str, expected: str) -> None:
    with pytest.raises(RemoteConfigError, match=expected):
        parse_url(text)


def test_credentials_in_a_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(RemoteConfigError, match="credentials in a URL are refused") as info:
        parse_url("s3://AKIAXX:topsecretvalue@bucket/data")
    assert "topsecretvalue" not in str(info.value) and "topsecretvalue" not in info.value.url


def test_child_refuses_escaping_names() -> None:
    with pytest.raises(RemoteConfigError, match=r"'\.\.'"):
        parse_url("s3://bucket/data").child("../other/x")


@pytest.mark.parametrize(("options", "expected"), [
    ({"timeout_s": 0}, "'timeout_s' must be a positive number"),
    ({"stall_s": 30.0, "timeout_s": 10.0}, "'stall_s' .* must be <= 'timeout_s'"),
    ({"part_bytes": 1024}, "'part_bytes' must be >= 5242880"),
    ({"request_retries": -1}, "'request_retries' must be a non-negative int"),
    ({"max_attempts": 1.5}, "'max_attempts' must be a positive int"),
    ({"transport": "ssh"}, "'transport' must be one of"),
])
def test_remote_config_is_validated_once(options: dict[str, object], expected: str) -> None:
    with pytest.raises(RemoteConfigError, match=expected):
        RemoteConfig(**options)  # type: ignore[arg-type]


def test_remote_config_accepts_a_transport_name() -> None:
    assert RemoteConfig(transport="helper").transport is TransportMode.HELPER  # type: ignore[arg-type]
    assert RemoteConfig().timeout_s <= 120

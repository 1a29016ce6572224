"""What a bucket holds, read with boto3 straight from the S3 server (not through the fault proxy), and uploads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.remote.fixtures import S3_ACCESS_KEY, S3_REGION, S3_SECRET


def client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION, aws_access_key_id=S3_ACCESS_KEY,
                        aws_secret_access_key=S3_SECRET)


def keys(endpoint: str, bucket: str, prefix: str = "") -> dict[str, int]:
    """Key relative to ``prefix`` -> size, of every object under it."""
    found: dict[str, int] = {}
    pages = client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            found[obj["Key"][len(prefix):].lstrip("/")] = obj["Size"]
    return found


def download(endpoint: str, bucket: str, prefix: str, dst: Path) -> Path:
    """Every object under ``prefix`` into ``dst`` (the same relative names); returns ``dst``."""
    s3 = client(endpoint)
    for name in keys(endpoint, bucket, prefix):
        path = dst / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read())
    return dst


def upload(endpoint: str, bucket: str, prefix: str, root: Path) -> None:
    """Every file under ``root`` to ``prefix/<relative path>``."""
    s3 = client(endpoint)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            s3.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(root).as_posix()}", Body=path.read_bytes())


def open_uploads(endpoint: str, bucket: str) -> list[str]:
    """Keys of the multipart uploads started and neither completed nor aborted."""
    return [u["Key"] for u in client(endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def flip_byte(endpoint: str, bucket: str, key: str, offset: int) -> None:
    s3 = client(endpoint)
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[offset] ^= 0x01
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))

"""The object-storage fixtures (``tests.remote.fixtures``: moto's S3 server on 127.0.0.1, the fault proxy) for
examples/object_storage.py."""

from tests.remote.fixtures import bucket, proxy, s3_env, s3_server  # noqa: F401

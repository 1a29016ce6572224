"""The object-storage fixtures (``tests.remote.fixtures``) for the cache tests."""

from tests.remote.fixtures import bucket, proxy, remote_dataset, s3_env, s3_server  # noqa: F401

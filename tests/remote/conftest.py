"""The object-storage fixtures (``tests.remote.fixtures``) for the tests in this folder."""

from tests.remote.fixtures import bucket, proxy, remote_dataset, s3_env, s3_server  # noqa: F401

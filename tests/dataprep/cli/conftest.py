"""The object-storage fixtures (``tests.remote.fixtures``: moto's S3 server, the fault proxy) for the command line's
progress over a remote RAW."""

from tests.remote.fixtures import bucket, proxy, s3_env, s3_server  # noqa: F401

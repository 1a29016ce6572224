"""``remote_bench``'s object store on this machine: moto's S3 server on 127.0.0.1 behind the fault proxy.

``Site`` starts the server (moto's ``ThreadedMotoServer``, the tests' real S3 server) and
the tests' ``FaultProxy`` in front of it (``tools.common.fault_proxy``: its link cap stands for
the node's network), makes a bucket, and points this process's environment at the proxy
(fake keys, ``AWS_ENDPOINT_URL`` for obstore and boto3, ``S3_ENDPOINT_URL`` for MosaicML
Streaming), so that every reader of the run, and every child process, goes through it.
``upload`` writes a folder straight to the server (not counted); ``body_bytes(prefix)``
is what the proxy sent under a prefix: the bytes a node downloaded.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tools.common.report import ToolError

if TYPE_CHECKING:
    from tools.common.fault_proxy import FaultProxy

__all__ = ["Site"]

ACCESS_KEY = "AKIAREMOTEBENCH0001"
SECRET_KEY = "remote-bench-" + "x" * 24  # a local server's fake key
REGION = "us-east-1"


class Site:
    """The server, the proxy and a bucket (module docstring); a context manager."""

    def __init__(self) -> None:
        self.bucket = f"bench-{uuid.uuid4().hex[:12]}"
        self._server: Any = None
        self.server_url = ""
        self._proxy: FaultProxy | None = None
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> Site:
        try:
            import boto3
            from moto.server import ThreadedMotoServer

            from tools.common.fault_proxy import FaultProxy
        except ImportError as err:
            raise ToolError(f"remote_bench needs moto[server] and boto3 (pip install 'moto[server]' boto3): {err}") \
                from err
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        self._server = server
        host, port = server.get_host_and_port()
        self.server_url = f"http://{host}:{port}"
        self._proxy = FaultProxy(self.server_url).start()
        self._set_env(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION,
                      AWS_REGION=REGION, AWS_ENDPOINT_URL=self.endpoint, S3_ENDPOINT_URL=self.endpoint)
        boto3.client("s3", endpoint_url=self.server_url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY).create_bucket(Bucket=self.bucket)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._proxy is not None:
            self._proxy.stop()
        if self._server is not None:
            self._server.stop()

    @property
    def proxy(self) -> FaultProxy:
        if self._proxy is None:
            raise ToolError("the site is not started (use it as a context manager)")
        return self._proxy

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def set_link(self, bytes_s: float | None) -> None:
        """Cap the node's link (all connections together); None: uncapped."""
        self.proxy.link_bytes_s = bytes_s

    def reset_counters(self) -> None:
        self.proxy.reset_counters()

    def body_bytes(self, prefix: str) -> int:
        """Response body bytes the proxy sent for objects under ``prefix`` since the last reset."""
        stats = self.proxy.stats
        with stats.cond:
            return sum(n for key, n in stats.body_bytes.items() if key.startswith(prefix + "/"))

    def upload(self, folder: Path, prefix: str) -> None:
        """Every file under ``folder`` to ``prefix`` straight to the server (manifest.json last)."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.server_url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY)
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        for path in sorted(files, key=lambda p: p.name == "manifest.json"):
            client.upload_file(str(path), self.bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")

    def _set_env(self, **values: str) -> None:
        for name, value in values.items():
            self._saved.setdefault(name, os.environ.get(name))
            os.environ[name] = value

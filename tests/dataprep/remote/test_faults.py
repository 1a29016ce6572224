"""A run to S3 when the store misbehaves: throttling, a server that goes away, a bucket that does not exist.

Faults come from the proxy between the real client and the real server (moto); nothing is mocked.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticReport
from tests.dataprep.helpers import assert_same_output
from tests.dataprep.remote.bucket_files import download, keys, open_uploads
from tools.common.fault_proxy import Fault, FaultKind, FaultProxy
from tests.remote.fixtures import S3_SECRET, S3Server
from tests.samples import wait_until

OPTIONS = ["--samples-per-shard", "25", "--no-progress"]


def test_a_fifth_of_requests_failing_still_completes_with_the_same_bytes(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, proxy: FaultProxy,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw, local = synthetic.root / "tables", tmp_path / "local"
    assert cli("shard", raw, local, *OPTIONS).rc == 0
    # One shard refused more often than the transport retries on its own: the client retries it, and logs that.
    proxy.add(Fault(FaultKind.SLOWDOWN, method="PUT", key="out/shard-00000-000001.parquet", times=4))
    proxy.add(Fault(FaultKind.SLOWDOWN, method=None, times=None, fraction=0.2))
    with caplog.at_level(logging.DEBUG):
        res = cli("-v", "shard", raw, f"s3://{bucket}/out", *OPTIONS, "--staging", tmp_path / "staging")
    assert res.rc == 0, res.text
    assert proxy.faults_applied(FaultKind.SLOWDOWN) >= 5
    assert "retrying put" in caplog.text and "SlowDown" in caplog.text
    assert S3_SECRET not in caplog.text + res.text
    assert_same_output(download(s3_server.endpoint, bucket, "out", tmp_path / "got"), local,
                       drop_manifest_keys=("command",))
    assert open_uploads(s3_server.endpoint, bucket) == []


def test_a_server_gone_mid_run_ends_in_an_error_naming_the_url_and_nothing_looks_complete(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, proxy: FaultProxy,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The proxy (the endpoint the client knows) stops once the third shard is uploaded."""
    third = "out/shard-00000-000002.parquet"

    def stop_after_third_shard() -> None:
        wait_until(lambda: proxy.requests(third, "PUT") >= 1, timeout_s=300)
        proxy.stop()

    stopper = threading.Thread(target=stop_after_third_shard, daemon=True)
    stopper.start()
    with caplog.at_level(logging.DEBUG):
        res = cli("-v", "shard", synthetic.root / "tables", f"s3://{bucket}/out", "--samples-per-shard", "5",
                  "--no-progress", "--remote-timeout", "3", "--staging", tmp_path / "staging")
    stopper.join()
    assert res.rc == 1, res.text
    assert S3_SECRET not in caplog.text + res.text
    assert f"s3://{bucket}/out/" in res.err and "timeout_s=3" in res.err and "endpoint" in res.err, res.err
    assert "manifest.json" not in keys(s3_server.endpoint, bucket, "out")
    assert not (tmp_path / "staging").exists() or list((tmp_path / "staging").iterdir()) == []


def test_a_missing_bucket_is_a_usage_error_naming_it(cli, synthetic: SyntheticReport, s3_env: str,
                                                     tmp_path: Path) -> None:
    res = cli("shard", synthetic.root / "tables", "s3://no-such-bucket-here/out", "--staging", tmp_path / "staging")
    assert res.rc == 2, res.text
    assert "bucket 'no-such-bucket-here' does not exist" in res.err and "create it first" in res.err

"""kill -9 of a run writing to S3, then the same command: it resumes from the checkpoint in the store.

No shard the checkpoint names is uploaded again (PUTs counted at the proxy), the output is
the bytes of an uninterrupted local run, and the secret key is in no object at any point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticReport
from tests.dataprep.helpers import assert_same_output, kill_when, table_tree
from tests.dataprep.remote.bucket_files import client, download, keys, open_uploads
from tools.common.fault_proxy import FaultProxy
from tests.remote.fixtures import S3_SECRET, S3Server

CASES = {
    "images": ["--samples-per-shard", "2", "--workers", "2", "--no-progress"],
    # Duplicate rows are found in the on-disk set of digests: it goes to the store with each checkpoint.
    "tables": ["--dedup-on", "url", "--samples-per-shard", "60", "--workers", "1", "--no-progress"],
}


def _objects_hold(endpoint: str, bucket: str, needle: bytes) -> list[str]:
    s3 = client(endpoint)
    return [key for key in keys(endpoint, bucket) if needle in s3.get_object(Bucket=bucket, Key=key)["Body"].read()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_killed_run_resumes_without_uploading_a_finished_shard_again(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, proxy: FaultProxy,
        tmp_path: Path, case: str) -> None:
    options = CASES[case]
    if case == "images":
        raw = synthetic.root / "images"
    else:
        raw = tmp_path / "raw"
        table_tree(raw, rows=3000)
    local, url = tmp_path / "local", f"s3://{bucket}/out"
    assert cli("shard", raw, local, *options).rc == 0
    checkpoint_key = "out/.dataprep/checkpoint.json"
    args = ["-v", "shard", raw, url, *options, "--staging", tmp_path / "staging"]
    assert kill_when(args, tmp_path, lambda: proxy.requests(checkpoint_key, "PUT") >= 5, timeout=300)
    stored = keys(s3_server.endpoint, bucket, "out")
    assert "manifest.json" not in stored and ".dataprep/checkpoint.json" in stored
    assert (".dataprep/seen/seen.json" in stored) == (case == "tables")
    checkpoint = json.loads(client(s3_server.endpoint).get_object(Bucket=bucket, Key=checkpoint_key)["Body"].read())
    finished = [s["name"] for s in checkpoint["shards"]]
    assert len(finished) >= 3
    assert _objects_hold(s3_server.endpoint, bucket, S3_SECRET.encode()) == []

    res = cli("shard", raw, url, *options, "--staging", tmp_path / "staging")
    assert res.rc == 0, res.text
    assert {name: proxy.requests(f"out/{name}", "PUT") for name in finished} == {name: 1 for name in finished}
    assert_same_output(download(s3_server.endpoint, bucket, "out", tmp_path / "got"), local,
                       drop_manifest_keys=("command",))
    assert not any(name.startswith(".dataprep") for name in keys(s3_server.endpoint, bucket, "out"))
    assert open_uploads(s3_server.endpoint, bucket) == []
    assert _objects_hold(s3_server.endpoint, bucket, S3_SECRET.encode()) == []
    assert not (tmp_path / "staging").exists() or list((tmp_path / "staging").iterdir()) == []

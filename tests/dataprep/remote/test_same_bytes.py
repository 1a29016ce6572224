"""``dataprep shard RAW s3://bucket/prefix``: the bytes of a local run, the manifest uploaded last, nothing else left.

A real S3 server (moto) behind the fault proxy; the bucket is read with boto3 straight from
the server. Images go through the forked writing child (``--workers 2``), tables and text
through the write loop in the main process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticReport
from tests.dataprep.helpers import assert_same_output, image_tree
from tests.dataprep.remote.bucket_files import download, keys, open_uploads
from tools.common.fault_proxy import FaultProxy
from tests.remote.fixtures import S3Server

CASES = {
    "images": ("images", ["--samples-per-shard", "9", "--workers", "2"]),
    "tables": ("tables", ["--samples-per-shard", "25"]),
    "tokens": ("text", ["--tokenizer", "bytes", "--samples-per-shard", "3"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_remote_output_is_the_bytes_of_a_local_run(cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server,
                                                    bucket: str, proxy: FaultProxy, tmp_path: Path, case: str) -> None:
    folder, options = CASES[case]
    raw, local, staging = synthetic.root / folder, tmp_path / "local", tmp_path / "staging"
    assert cli("shard", raw, local, *options).rc == 0
    res = cli("shard", raw, f"s3://{bucket}/runs/{case}", *options, "--staging", staging)
    assert res.rc == 0, res.text
    assert f"s3://{bucket}/runs/{case}" in res.out
    got = download(s3_server.endpoint, bucket, f"runs/{case}", tmp_path / "got")
    assert_same_output(got, local, drop_manifest_keys=("command",))
    assert sorted(keys(s3_server.endpoint, bucket, f"runs/{case}")) == sorted(p.name for p in local.iterdir())
    assert open_uploads(s3_server.endpoint, bucket) == []
    assert list(staging.iterdir()) == []  # the staging folder went with the run


def test_the_manifest_is_the_last_object_written_after_a_listing(cli, synthetic: SyntheticReport, s3_env: str,
                                                                bucket: str, proxy: FaultProxy,
                                                                tmp_path: Path) -> None:
    """Every other object of the output is stored, and OUT listed, before the manifest's PUT (the proxy's log)."""
    assert cli("shard", synthetic.root / "tables", f"s3://{bucket}/t", "--samples-per-shard", "25").rc == 0
    log = proxy.log()
    writes = [(at, key) for at, (method, key, query) in enumerate(log)
              if method == "PUT" or (method == "POST" and "uploads" in query)]  # a PUT, or a multipart upload
    manifest_at = [at for at, key in writes if key == "t/manifest.json"]
    assert len(manifest_at) == 1
    output_writes = [at for at, key in writes if key != "t/manifest.json" and not key.startswith("t/.dataprep/")]
    assert len(output_writes) >= 5 and max(output_writes) < manifest_at[0]
    listed = [at for at, (method, _, query) in enumerate(log) if method == "GET" and "list-type" in query]
    assert any(max(output_writes) < at < manifest_at[0] for at in listed)
    deletes = [at for at, (method, _, query) in enumerate(log) if method == "DELETE" or "delete" in query]
    assert any(at > manifest_at[0] for at in deletes), "the state folder is removed after the manifest"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_run_without_rejects_publishes_an_empty_rejects_file(cli, s3_env: str, s3_server: S3Server, bucket: str,
                                                               tmp_path: Path, workers: str) -> None:
    """A clean input (nothing rejected) to object storage: OUT holds the local run's files, an empty rejects file
    among them (a rejects file that no reject ever synced was once never uploaded, and the run failed at its end)."""
    raw, local = tmp_path / "raw", tmp_path / "local"
    image_tree(raw, {"cat": 4, "dog": 3})
    options = ["--samples-per-shard", "3", "--workers", workers]
    assert cli("shard", raw, local, *options).rc == 0
    res = cli("shard", raw, f"s3://{bucket}/clean{workers}", *options, "--staging", tmp_path / "staging")
    assert res.rc == 0, res.text
    got = download(s3_server.endpoint, bucket, f"clean{workers}", tmp_path / "got")
    assert (got / "rejects.jsonl").read_bytes() == b""
    assert_same_output(got, local, drop_manifest_keys=("command",))

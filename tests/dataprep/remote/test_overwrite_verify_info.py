"""A finished remote OUT: run again (complete, other options refused, ``--overwrite``), verified, described.

``--overwrite`` removes only what dataprep wrote, and a prefix holding objects of someone else is
refused as a local OUT holding foreign files is; ``dataprep verify`` streams every shard of the
store through sha256 and names a flipped byte; ``dataprep info`` says what a local run's says.
"""

from __future__ import annotations

import json
from pathlib import Path

from dataprep.synthetic import SyntheticReport
from tests.dataprep.helpers import assert_same_output
from tests.dataprep.remote.bucket_files import client, download, flip_byte, keys
from tools.common.fault_proxy import FaultProxy
from tests.remote.fixtures import S3Server

OPTIONS = ["--samples-per-shard", "25", "--no-progress"]


def test_rerun_complete_other_options_refused_overwrite_removes_only_ours(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, proxy: FaultProxy,
        tmp_path: Path) -> None:
    raw, url = synthetic.root / "tables", f"s3://{bucket}/out"
    assert cli("shard", raw, url, *OPTIONS).rc == 0
    first = keys(s3_server.endpoint, bucket, "out")
    proxy.reset_counters()
    again = cli("shard", raw, url, *OPTIONS)
    assert again.rc == 0 and "already complete" in again.out
    assert proxy.total_requests("PUT") == 0
    other = cli("shard", raw, url, "--samples-per-shard", "40", "--no-progress")
    assert other.rc == 2 and "finished output of different options" in other.err and url in other.err, other.err
    assert keys(s3_server.endpoint, bucket, "out") == first

    local = tmp_path / "local"
    assert cli("shard", raw, local, "--samples-per-shard", "40").rc == 0
    assert cli("shard", raw, url, "--samples-per-shard", "40", "--overwrite").rc == 0
    assert_same_output(download(s3_server.endpoint, bucket, "out", tmp_path / "got"), local,
                       drop_manifest_keys=("command",))
    assert sorted(keys(s3_server.endpoint, bucket, "out")) == sorted(p.name for p in local.iterdir())

    client(s3_server.endpoint).put_object(Bucket=bucket, Key="out/notes.txt", Body=b"mine")
    before = keys(s3_server.endpoint, bucket, "out")
    foreign = cli("shard", raw, url, *OPTIONS, "--overwrite")
    assert foreign.rc == 2 and "notes.txt" in foreign.err and "dataprep did not write" in foreign.err, foreign.err
    assert keys(s3_server.endpoint, bucket, "out") == before  # nothing removed


def test_verify_streams_each_shard_and_names_a_flipped_byte_and_info_matches_local(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    raw, url, local = synthetic.root / "images", f"s3://{bucket}/img", tmp_path / "local"
    assert cli("shard", raw, local, "--samples-per-shard", "9", "--workers", "1").rc == 0
    assert cli("shard", raw, url, "--samples-per-shard", "9", "--workers", "1").rc == 0
    ok = cli("verify", url, "--json")
    assert ok.rc == 0, ok.text
    assert json.loads(ok.out) == json.loads(cli("verify", local, "--json").out)
    assert json.loads(cli("info", url, "--json").out) == json.loads(cli("info", local, "--json").out)
    assert "class_00" in cli("info", url).out

    flip_byte(s3_server.endpoint, bucket, "img/shard-00000-000001.tar", 700)
    bad = cli("verify", url)
    assert bad.rc == 1 and "PROBLEM  shard-00000-000001.tar: sha256" in bad.out, bad.text
    assert "FAILED" in bad.out
    missing = cli("verify", f"s3://{bucket}/nothing-here")
    assert missing.rc == 1 and "no manifest" in missing.err, missing.text

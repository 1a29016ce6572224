"""RAW in the store (``dataprep shard s3://bucket/raw/ OUT``): listed and read through the client.

The shards are the bytes of a run over the same files on disk; the plan's digest is the
listing's (key, size, last-modified), so a RAW changed in the store is told as a local one is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticReport
from tests.dataprep.helpers import assert_same_output
from tests.dataprep.remote.bucket_files import client, download, upload
from tests.remote.fixtures import S3Server


def _keyable_copy(src: Path, dst: Path) -> Path:
    """``src`` without what a store cannot hold: symlinks, and names that are not UTF-8 (keys are UTF-8)."""
    shutil.copytree(src, dst, symlinks=True)
    for path in sorted(dst.rglob("*")):
        try:
            path.relative_to(dst).as_posix().encode()
        except UnicodeEncodeError:
            path.unlink()
            continue
        if path.is_symlink():
            path.unlink()
    return dst


@pytest.mark.parametrize("folder", ["images", "tables"])
def test_a_remote_raw_gives_the_shards_of_the_same_files_on_disk(
        cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server, bucket: str, tmp_path: Path,
        folder: str) -> None:
    raw = _keyable_copy(synthetic.root / folder, tmp_path / "raw")
    upload(s3_server.endpoint, bucket, f"raw/{folder}", raw)
    options = ["--samples-per-shard", "9", "--workers", "2"]
    local, from_store = tmp_path / "local", tmp_path / "from-store"
    assert cli("shard", raw, local, *options).rc == 0
    res = cli("shard", f"s3://{bucket}/raw/{folder}/", from_store, *options, "--staging", tmp_path / "staging")
    assert res.rc == 0, res.text
    # The manifest records RAW (its URL) and its listing's digest (of the objects' times, not the files'); the
    # rejects name RAW's objects by their URL.
    url = f"s3://{bucket}/raw/{folder}"
    local_rejects = (local / "rejects.jsonl").read_text().replace(json.dumps(f"{raw}/")[1:-1], f"{url}/")
    assert (from_store / "rejects.jsonl").read_text() == local_rejects
    (local / "rejects.jsonl").write_text(local_rejects)
    assert_same_output(from_store, local, drop_manifest_keys=("command", "options", "raw_listing_sha256"))
    options_used = json.loads((from_store / "manifest.json").read_bytes())["options"]
    assert options_used["raw"] == url
    assert not (tmp_path / "staging").exists() or list((tmp_path / "staging").iterdir()) == []

    to_store = cli("shard", f"s3://{bucket}/raw/{folder}", f"s3://{bucket}/out/{folder}", *options)
    assert to_store.rc == 0, to_store.text
    assert_same_output(download(s3_server.endpoint, bucket, f"out/{folder}", tmp_path / "got"), from_store,
                       drop_manifest_keys=("command",))


def test_a_raw_changed_in_the_store_is_told(cli, synthetic: SyntheticReport, s3_env: str, s3_server: S3Server,
                                           bucket: str, tmp_path: Path) -> None:
    upload(s3_server.endpoint, bucket, "raw", synthetic.root / "tables")
    url, out = f"s3://{bucket}/raw", tmp_path / "out"
    assert cli("shard", url, out, "--samples-per-shard", "50").rc == 0
    assert cli("shard", url, out, "--samples-per-shard", "50").rc == 0  # complete: nothing downloaded
    client(s3_server.endpoint).put_object(Bucket=bucket, Key="raw/part-2.csv", Body=b"id,text\n1,new\n")
    res = cli("shard", url, out, "--samples-per-shard", "50")
    assert res.rc == 2 and f"RAW {url} changed since" in res.err, res.text
    missing = cli("shard", f"s3://{bucket}/no-raw-here", tmp_path / "other")
    assert missing.rc == 2 and "holds no objects" in missing.err, missing.text


def test_a_resume_mirrors_raw_where_the_plan_names_it(cli, synthetic: SyntheticReport, s3_env: str,
                                                      s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    """The plan names RAW's files by their path in the mirror: a resume with another --staging is refused, one
    with the same finishes."""
    upload(s3_server.endpoint, bucket, "raw", synthetic.root / "tables")
    url, out = f"s3://{bucket}/raw", tmp_path / "out"
    first = cli("shard", url, out, "--max-reject-fraction", "0", "--staging", tmp_path / "a")
    assert first.rc == 1 and (out / ".dataprep" / "plan.json").exists(), first.text  # stopped before the manifest
    moved = cli("shard", url, out, "--staging", tmp_path / "b")
    assert moved.rc == 2 and "rerun with the same --staging" in moved.err and str(tmp_path / "a") in moved.err
    assert cli("shard", url, out, "--staging", tmp_path / "a").rc == 0


def test_a_range_task_on_another_node_stages_only_its_ranges_files(s3_env: str, s3_server: S3Server, bucket: str,
                                                                   tmp_path: Path) -> None:
    """A node without the driver's mirror: the files of the task's units are put at the plan's paths, with the
    objects' times (so the node's view of RAW has the listing's digest), and nothing else."""
    from dataprep.commands.config import ShardConfig
    from dataprep.commands.stage_options import raw_source
    from dataprep.inputs.raw_source import stage_units
    from dataprep.inputs.records import FilePart

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text('{"text": "one"}\n')
    (raw / "b.jsonl").write_text('{"text": "two"}\n')
    upload(s3_server.endpoint, bucket, "raw", raw)
    config = ShardConfig(raw=f"s3://{bucket}/raw", out=tmp_path / "out", staging=tmp_path / "node")
    unit = FilePart(source="b.jsonl", path=str(config.raw / "b.jsonl"), key="b", size=16)
    stage_units(raw_source(config), [unit])
    assert sorted(p.name for p in config.raw.iterdir()) == ["b.jsonl"]
    assert (config.raw / "b.jsonl").read_bytes() == (raw / "b.jsonl").read_bytes()
    stage_units(raw_source(config), [FilePart(source="a.jsonl", path=str(config.raw / "a.jsonl"), key="a", size=16)])
    local = ShardConfig(raw=config.raw, out=tmp_path / "out2")
    assert raw_source(local).digest() == raw_source(config).digest()  # the staged files list as the objects do

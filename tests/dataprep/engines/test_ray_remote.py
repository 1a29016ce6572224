"""``dataprep shard --engine ray`` to ``s3://``: every range task uploads its attempt, the driver publishes it
by copies in the store; the output is the bytes of a local run, and nothing else is left under the prefix.

One cluster of two nodes (two raylets on this machine, 1 CPU each, as ``test_ray.py`` starts it)
for the module. Its processes inherit the environment the module sets before starting it: the
keys and ``AWS_ENDPOINT_URL`` of a fault proxy in front of the session's S3 server (moto), as
each node of a real cluster has its own credentials and endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataprep.helpers import assert_same_output, numbered_images, shard_cli
from tests.dataprep.remote.bucket_files import download, keys, open_uploads, upload
from tools.common.fault_proxy import FaultProxy
from tests.remote.fixtures import S3_ACCESS_KEY, S3_REGION, S3_SECRET, S3Server, make_bucket, s3_server  # noqa: F401

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def store(s3_server: S3Server) -> Iterator[FaultProxy]:  # noqa: F811 - the session fixture, imported above
    """The proxy every node talks to, in the environment of this process and of the cluster it starts."""
    saved = dict(os.environ)
    with FaultProxy(s3_server.endpoint, seed=0) as proxy:
        os.environ.update(AWS_ACCESS_KEY_ID=S3_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET,
                          AWS_DEFAULT_REGION=S3_REGION, AWS_ENDPOINT_URL=proxy.endpoint)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
            os.environ.pop(name, None)
        try:
            yield proxy
        finally:
            os.environ.clear()
            os.environ.update(saved)


@pytest.fixture(scope="module")
def cluster(store: FaultProxy) -> Iterator[str]:
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        nodes.add_node(num_cpus=1)
        ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield nodes.address
    finally:
        ray.shutdown()
        nodes.shutdown()


def _table(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = [f'{{"id": {i % 41 if i % 3 else 1000 + i}, "text": "row {i}"}}' for i in range(150)]
    (root / "t.jsonl").write_text("\n".join(lines) + "\n")
    return root


CASES = {
    "table": (_table, ["--dedup-on", "id", "--range-size", "1KiB", "--samples-per-shard", "16"]),
    "images": (lambda root: numbered_images(root, 18, classes=3), ["--range-size", "3KiB", "--samples-per-shard", "3"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ray_to_s3_writes_the_bytes_of_a_local_run_from_every_node(cluster: str, store: FaultProxy,
                                                                    s3_server: S3Server,  # noqa: F811
                                                                    tmp_path: Path, case: str) -> None:
    make, options = CASES[case]
    raw = make(tmp_path / "raw")
    bucket = make_bucket(s3_server.endpoint)
    local = tmp_path / "local"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    assert shard_cli(raw, f"s3://{bucket}/out", *options, "--engine", "ray", "--staging", tmp_path / "staging") == 0
    got = download(s3_server.endpoint, bucket, "out", tmp_path / "got")
    assert_same_output(got, local, drop_manifest_keys=("command",))
    assert len({name.split("-")[1] for name in keys(s3_server.endpoint, bucket, "out") if name.startswith("shard")}) \
        >= 3  # several ranges, written by tasks
    assert sorted(keys(s3_server.endpoint, bucket)) == sorted(f"out/{p.name}" for p in local.iterdir())
    assert open_uploads(s3_server.endpoint, bucket) == []


def test_ray_from_a_raw_in_the_store_to_the_store(cluster: str, store: FaultProxy, s3_server: S3Server,  # noqa: F811
                                                  tmp_path: Path) -> None:
    """RAW listed and mirrored through the client by the driver, each task staging its range's files."""
    make, options = CASES["table"]
    raw = make(tmp_path / "raw")
    bucket = make_bucket(s3_server.endpoint)
    upload(s3_server.endpoint, bucket, "raw", raw)
    local = tmp_path / "from-disk"
    assert shard_cli(f"s3://{bucket}/raw", local, *options, "--workers", "2") == 0
    assert shard_cli(f"s3://{bucket}/raw", f"s3://{bucket}/out", *options, "--engine", "ray") == 0
    got = download(s3_server.endpoint, bucket, "out", tmp_path / "got")
    assert_same_output(got, local, drop_manifest_keys=("command",))

"""`dataprep shard --engine ray` over compressed corpora (issue 27): the bytes of a local run, damage included.

A Ray cluster of one node (2 CPUs, on this machine) for the module, started and shut down here; the range
tasks decompress their files themselves (a compressed file is one unit of the plan, read whole by one task).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dataprep.compressed_samples import CODECS, EXTENSIONS, compress
from tests.dataprep.helpers import assert_same_output, read_rejects, shard_cli

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    """This process the driver of a local Ray cluster of 2 CPUs for the module."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False)
        yield nodes.address
    finally:
        ray.shutdown()
        nodes.shutdown()


def _compressed_parts(root: Path) -> Path:
    """One JSONL file per codec, lines repeated across files (duplicates found across ranges), and one
    truncated file."""
    for n, codec in enumerate(CODECS):
        rows = [json.dumps({"id": n * 100 + i, "text": f"text {i % 60} of part {n % 2}"}) for i in range(90)]
        (root / f"part-{n}.jsonl.{EXTENSIONS[codec]}").parent.mkdir(parents=True, exist_ok=True)
        (root / f"part-{n}.jsonl.{EXTENSIONS[codec]}").write_bytes(compress("\n".join(rows).encode() + b"\n", codec))
    packed = compress(b"".join(b'{"id": %d, "text": "cut %d"}\n' % (i, i) for i in range(5000)), "gzip")
    (root / "part-9.jsonl.gz").write_bytes(packed[: len(packed) * 3 // 4])
    return root


@pytest.mark.parametrize("output", ["parquet", "tokens"])
def test_ray_over_compressed_inputs_writes_the_bytes_of_a_local_run(cluster, tmp_path, output):
    raw = _compressed_parts(tmp_path / "raw")
    options = ["--range-size", "1KiB", "--samples-per-shard", "40", "--dedup-on", "text"]
    if output == "tokens":
        options = [*options[:4], "--tokenizer", "bytes"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert shard_cli(raw, local, *options, "--workers", "2") == 0
    assert shard_cli(raw, on_ray, *options, "--engine", "ray") == 0
    assert_same_output(on_ray, local, drop_manifest_keys=("command",))
    reasons = [r["reason"] for r in read_rejects(on_ray)]
    assert reasons.count("corrupt_compressed") == 1 and reasons.count("duplicate") > 0

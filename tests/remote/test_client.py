"""The object-store client against a real S3 server (moto) through the fault proxy; never a mock."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import random
import socket
from pathlib import Path

import boto3
import pytest

from dataprep.remote import (
    RemoteChangedError,
    RemoteConfigError,
    RemoteConfig,
    RemoteError,
    RemoteNotFoundError,
    RemoteStore,
    RemoteTimeoutError,
    inline_transport_safe,
)
from tools.common.fault_proxy import Fault, FaultKind, FaultProxy
from tests.remote.fixtures import S3_ACCESS_KEY, S3_REGION, S3_SECRET, S3Server

FAST = RemoteConfig(timeout_s=3.0, stall_s=0.5, connect_timeout_s=0.5, backoff_s=0.01, max_backoff_s=0.1)
MIB = 2**20


def _data(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def test_put_list_head_read_delete(s3_env: str, bucket: str) -> None:
    with RemoteStore(f"s3://{bucket}/ds") as store:
        store.put("b/two.bin", _data(1000, 2))
        store.put("a.bin", _data(10, 1))
        assert [(m.name, m.size) for m in store.list()] == [("a.bin", 10), ("b/two.bin", 1000)]
        assert [m.name for m in store.list("b")] == ["b/two.bin"]
        meta = store.head("b/two.bin")
        assert meta.size == 1000 and meta.etag
        assert store.read_bytes("a.bin") == _data(10, 1)
        assert b"".join(store.iter_range("b/two.bin", 100, 300)) == _data(1000, 2)[100:300]
        assert b"".join(store.iter_range("b/two.bin", 990)) == _data(1000, 2)[990:]
        store.put("empty", b"")
        assert store.read_bytes("empty") == b""
        assert store.exists("a.bin") and not store.exists("nope")
        store.delete(["a.bin", "nope"])
        assert [m.name for m in store.list()] == ["b/two.bin", "empty"]


def test_a_missing_object_and_a_missing_bucket_name_the_url(s3_env: str, bucket: str) -> None:
    with RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        with pytest.raises(RemoteNotFoundError, match=f"s3://{bucket}/ds/missing.bin: no such object"):
            store.read_bytes("missing.bin")
    with RemoteStore("s3://no-such-bucket-here/ds", FAST) as store:
        with pytest.raises(RemoteNotFoundError, match="s3://no-such-bucket-here/ds.*bucket does not exist"):
            store.put("x", b"1")


def test_a_local_folder_is_a_store_too(tmp_path: Path) -> None:
    with RemoteStore(f"file://{tmp_path}") as store:
        store.put("sub/x.bin", _data(100))
        assert (tmp_path / "sub" / "x.bin").read_bytes() == _data(100)
        assert [m.name for m in store.list()] == ["sub/x.bin"]
        assert b"".join(store.iter_range("sub/x.bin", 5, 10)) == _data(100)[5:10]
        with pytest.raises(RemoteNotFoundError):
            store.head("none")


@pytest.mark.parametrize("kind", [FaultKind.RESET, FaultKind.TRUNCATE, FaultKind.STALL])
def test_a_body_cut_short_is_read_again_from_where_it_stopped(s3_env: str, bucket: str, proxy: FaultProxy,
                                                               kind: FaultKind) -> None:
    data = _data(3 * MIB, 5)
    with RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        store.put("x.bin", data)
        proxy.add(Fault(kind, key="ds/x.bin", after_bytes=MIB))
        assert b"".join(store.iter_range("x.bin")) == data
    assert proxy.faults_applied(kind) == 1
    assert proxy.requests("ds/x.bin") == 2
    assert proxy.ranges("ds/x.bin")[-1].startswith("bytes=")  # the second request asked for the rest only
    assert proxy.body_bytes("ds/x.bin") < 2 * len(data)


@pytest.mark.parametrize("request_retries", [3, 0], ids=["transport-retries", "client-retries"])
def test_a_fifth_of_requests_failing_with_503_slowdown_still_completes(s3_env: str, bucket: str, proxy: FaultProxy,
                                                                       request_retries: int) -> None:
    objects = {f"o{i}.bin": _data(20_000, i) for i in range(20)}
    proxy.add(Fault(FaultKind.SLOWDOWN, method=None, key="ds/", times=None, fraction=0.2))
    # Stalls and time-outs generous: here only the 503s may cause a request to be sent again (a slow answer
    # on a busy machine would otherwise be retried too, and the count below would not be exact).
    config = dataclasses.replace(FAST, request_retries=request_retries, stall_s=60.0, timeout_s=120.0)
    with RemoteStore(f"s3://{bucket}/ds", config) as store:
        for name, data in objects.items():
            store.put(name, data)
        for name, data in objects.items():
            assert store.read_bytes(name) == data
        assert len(store.list()) == 20
    answered = 41  # 20 puts, 20 gets, 1 list
    slowdowns = proxy.faults_applied(FaultKind.SLOWDOWN)
    assert slowdowns > 0
    assert proxy.total_requests() == answered + slowdowns  # each failure retried once, nothing else repeated
    assert slowdowns < answered  # bounded: about a quarter of the answered requests, not a storm
    if request_retries == 0:
        assert store.retries.value == slowdowns  # each one retried by the client, with backoff


def test_a_server_that_is_gone_ends_in_a_timeout_naming_the_url(monkeypatch: pytest.MonkeyPatch,
                                                                s3_env: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with RemoteStore("s3://bucket-gone/ds", FAST) as store:
        with pytest.raises(RemoteTimeoutError, match=r"head s3://bucket-gone/ds/x\.bin: no progress") as info:
            store.head("x.bin")
    assert "AWS_ENDPOINT_URL" in str(info.value)  # the hint says what to check
    assert 1 <= store.retries.value < FAST.max_attempts


def test_a_server_that_stalls_for_ever_ends_in_a_timeout(s3_env: str, bucket: str, proxy: FaultProxy) -> None:
    with RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        store.put("x.bin", _data(MIB))
        proxy.add(Fault(FaultKind.STALL, key="ds/x.bin", after_bytes=0, times=None))
        with pytest.raises(RemoteTimeoutError, match=rf"get s3://{bucket}/ds/x\.bin: no progress"):
            store.read_bytes("x.bin")
    proxy.release_stalls()


def test_an_object_replaced_between_reads_of_one_version_is_refused(s3_env: str, bucket: str) -> None:
    with RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        store.put("x.bin", _data(1000, 1))
        etag = store.head("x.bin").etag
        store.put("x.bin", _data(1000, 2))
        with pytest.raises(RemoteChangedError, match=f"s3://{bucket}/ds/x.bin: the object was replaced"):
            b"".join(store.iter_range("x.bin", 500, etag=etag))


def _open_uploads(server: S3Server, bucket: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name=S3_REGION,
                          aws_access_key_id=S3_ACCESS_KEY, aws_secret_access_key=S3_SECRET)
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def test_large_objects_go_in_parts_and_a_failed_upload_leaves_nothing_open(
        s3_env: str, bucket: str, proxy: FaultProxy, s3_server: S3Server, tmp_path: Path) -> None:
    data = _data(12 * MIB, 3)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    config = RemoteConfig(timeout_s=2.0, stall_s=0.5, backoff_s=0.01, max_backoff_s=0.05, part_bytes=5 * MIB)
    with RemoteStore(f"s3://{bucket}/ds", config) as store:
        store.put("big.bin", source)
        assert store.read_bytes("big.bin") == data
        assert proxy.requests("ds/big.bin", "POST") == 2  # create + complete: a multipart upload
        proxy.add(Fault(FaultKind.SLOWDOWN, method="PUT", key="ds/big2.bin", query="partNumber=2", times=None))
        with pytest.raises(RemoteError, match=f"put s3://{bucket}/ds/big2.bin"):
            store.put("big2.bin", source)
        assert not store.exists("big2.bin")
    assert _open_uploads(s3_server, bucket) == []
    assert proxy.requests("ds/big2.bin", "DELETE") >= 1  # each failed attempt aborted its upload


def _read_in_child(url: str, name: str, expected: bytes, queue: multiprocessing.Queue[object]) -> None:
    store = RemoteStore(url, FAST)  # fresh; the parent has used obstore in this memory image
    store.put("from-child.bin", expected[:1000])
    queue.put((inline_transport_safe(), store.read_bytes(name) == expected, [m.name for m in store.list()]))


def test_a_forked_child_of_a_process_that_used_obstore_reads_through_a_helper(s3_env: str, bucket: str) -> None:
    url = f"s3://{bucket}/ds"
    with RemoteStore(url, FAST) as store:
        store.put("x.bin", _data(2 * MIB, 9))
        assert store.read_bytes("x.bin") == _data(2 * MIB, 9)  # obstore's runtime runs in this process
        ctx = multiprocessing.get_context("fork")
        queue: multiprocessing.Queue[object] = ctx.Queue()
        child = ctx.Process(target=_read_in_child, args=(url, "x.bin", _data(2 * MIB, 9), queue))
        child.start()
        child.join(120)  # a hang guard only: obstore itself would hang here for ever
        assert child.exitcode == 0
        assert queue.get(timeout=1) == (False, True, ["from-child.bin", "x.bin"])
        assert store.read_bytes("from-child.bin") == _data(2 * MIB, 9)[:1000]


def test_credentials_from_an_aws_profile(monkeypatch: pytest.MonkeyPatch, s3_env: str, bucket: str,
                                         tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[trainer]\naws_access_key_id = {S3_ACCESS_KEY}\naws_secret_access_key = {S3_SECRET}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "trainer")
    with RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        store.put("x", b"profile")
        assert store.read_bytes("x") == b"profile"


def test_the_store_pickles_without_its_connection(s3_env: str, bucket: str) -> None:
    import pickle

    store = RemoteStore(f"s3://{bucket}/ds", FAST)
    store.put("x", b"1")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.url == store.url and copy.config == store.config and copy.read_bytes("x") == b"1"
    assert os.getpid() == store._pid


@pytest.mark.parametrize("mode", ["inline", "helper"])
def test_attributes_copy_and_single_puts_up_to_a_bound(s3_env: str, bucket: str, proxy: FaultProxy,
                                                       mode: str) -> None:
    """What dataprep's output needs: a sha256 kept with the object, a copy in the store that keeps it, and a file
    above ``part_bytes`` still in one PUT when ``max_single_put_bytes`` allows (no multipart upload to leave open)."""
    config = dataclasses.replace(FAST, timeout_s=30.0, stall_s=10.0, part_bytes=5 * MIB, max_single_put_bytes=8 * MIB,
                                 transport=mode)
    with RemoteStore(f"s3://{bucket}/ds", config) as store:
        store.put("a.bin", _data(6 * MIB, 3), attributes={"sha256": "abc"})
        assert proxy.requests("ds/a.bin", "PUT") == 1 and proxy.requests("ds/a.bin", "POST") == 0
        store.copy("a.bin", "b.bin")
        meta, attributes = store.attributes("b.bin")
        assert meta.size == 6 * MIB and attributes["sha256"] == "abc"
        assert proxy.requests("ds/b.bin", "PUT") == 1 and proxy.requests("ds/a.bin", "GET") == 0  # copied in the store
        assert store.read_bytes("b.bin") == _data(6 * MIB, 3)
    with pytest.raises(RemoteConfigError, match="max_single_put_bytes"):
        RemoteConfig(max_single_put_bytes=6 * 2**30)


def test_a_file_sent_in_one_put_is_retried_after_a_refusal(s3_env: str, bucket: str, proxy: FaultProxy,
                                                           tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A memory-mapped file whose PUT failed more often than the transport retries: the client sends it again,
    and its log names the store's refusal (not the mapping, which the failed request may still hold)."""
    source = tmp_path / "f.bin"
    source.write_bytes(_data(MIB, 4))
    proxy.add(Fault(FaultKind.SLOWDOWN, method="PUT", key="ds/f.bin", times=FAST.request_retries + 1))
    with caplog.at_level(logging.INFO, logger="dataprep.remote"), RemoteStore(f"s3://{bucket}/ds", FAST) as store:
        store.put("f.bin", source)
        assert store.read_bytes("f.bin") == _data(MIB, 4) and store.retries.value >= 1
    assert "retrying put" in caplog.text and "SlowDown" in caplog.text and "BufferError" not in caplog.text

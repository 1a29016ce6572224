"""tools.profile.malloc: finding the allocator, the child environment, exec passthrough, --check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.common import allocators
from tools.common.allocators import DEFAULT_MALLOC_CONF, AllocatorNotFound, allocator_env, allocator_of, find_library
from tools.common.report import ToolError
from tools.profile import malloc

REPO = Path(__file__).resolve().parents[3]
PRINT_ALLOCATOR = "import os; from tools.common.allocators import allocator_of; print(allocator_of(os.getpid()))"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc are Linux-only")


@pytest.fixture(scope="module")
def jemalloc() -> Path:
    try:
        return find_library("jemalloc")
    except AllocatorNotFound:
        pytest.skip("libjemalloc2 is not installed")


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Make every library search come up empty."""
    monkeypatch.setattr(allocators, "SEARCH_DIRS", (tmp_path,))
    monkeypatch.setattr(allocators, "_ldconfig_libraries", dict)
    monkeypatch.delenv("JEMALLOC_PATH", raising=False)
    monkeypatch.delenv("TCMALLOC_PATH", raising=False)


def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.profile.malloc", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120, check=False
    )


def test_child_maps_jemalloc_when_launched_with_it(jemalloc: Path) -> None:
    result = launch("--allocator", "jemalloc", "--", sys.executable, "-c", PRINT_ALLOCATOR)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "jemalloc"
    assert str(jemalloc) in result.stderr  # says what it set: never silently


def test_system_allocator_removes_an_inherited_jemalloc(jemalloc: Path) -> None:
    env = {**os.environ, "LD_PRELOAD": str(jemalloc)}
    result = launch("--allocator", "system", "--", sys.executable, "-c", PRINT_ALLOCATOR, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "system"


def test_exit_code_and_signal_pass_through(jemalloc: Path) -> None:
    assert launch("--", sys.executable, "-c", "import sys; sys.exit(7)").returncode == 7
    killed = launch("--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert killed.returncode == -signal.SIGTERM  # exec'd: the launcher itself was the killed process


def test_unknown_command_exits_127(jemalloc: Path) -> None:
    result = launch("--", "no-such-command-shardfeed")
    assert result.returncode == 127
    assert "no-such-command-shardfeed" in result.stderr


@pytest.mark.parametrize(("allocator", "package"), [("tcmalloc", "libtcmalloc-minimal4"), ("jemalloc", "libjemalloc2")])
def test_missing_library_exits_2_naming_the_debian_package(
    nowhere: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], allocator: str, package: str
) -> None:
    def no_exec(*args: object) -> None:
        raise AssertionError("must not exec without the library")

    monkeypatch.setattr(os, "execvpe", no_exec)
    assert malloc.main(["--allocator", allocator, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert f"apt-get install {package}" in err
    assert f"{allocator} not found" in err


def test_path_variable_wins_and_a_bad_one_is_named(nowhere: None, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    lib = tmp_path / "custom" / "libjemalloc.so.2"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    monkeypatch.setenv("JEMALLOC_PATH", str(lib.parent))
    assert find_library("jemalloc") == lib
    monkeypatch.setenv("JEMALLOC_PATH", str(tmp_path / "missing.so"))
    with pytest.raises(AllocatorNotFound, match="JEMALLOC_PATH="):
        find_library("jemalloc")


def test_ldconfig_cache_is_the_fallback(jemalloc: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JEMALLOC_PATH", raising=False)
    monkeypatch.setattr(allocators, "SEARCH_DIRS", (tmp_path,))
    if "libjemalloc.so.2" not in allocators._ldconfig_libraries():
        pytest.skip("ldconfig does not list jemalloc here")
    assert find_library("jemalloc").name == "libjemalloc.so.2"


def test_malloc_conf_default_inherited_and_explicit(jemalloc: Path) -> None:
    assert allocator_env("jemalloc", base_env={})["MALLOC_CONF"] == DEFAULT_MALLOC_CONF
    assert allocator_env("jemalloc", base_env={"MALLOC_CONF": "narenas:2"})["MALLOC_CONF"] == "narenas:2"
    explicit = allocator_env("jemalloc", base_env={"MALLOC_CONF": "narenas:2"}, malloc_conf="narenas:4")
    assert explicit["MALLOC_CONF"] == "narenas:4"
    assert "MALLOC_CONF" not in allocator_env("system", base_env={})
    with pytest.raises(ToolError, match="jemalloc only"):
        allocator_env("system", base_env={}, malloc_conf="narenas:4")


def test_ld_preload_prepends_and_replaces_other_allocators(jemalloc: Path) -> None:
    env = allocator_env("jemalloc", base_env={"LD_PRELOAD": "/opt/libfoo.so /usr/lib/libtcmalloc.so.4", "HOME": "/h"})
    assert env["LD_PRELOAD"] == f"{jemalloc}:/opt/libfoo.so"
    assert env["HOME"] == "/h"
    env = allocator_env("system", base_env={"LD_PRELOAD": f"{jemalloc}:/opt/libfoo.so"})
    assert env["LD_PRELOAD"] == "/opt/libfoo.so"
    assert "LD_PRELOAD" not in allocator_env("system", base_env={"LD_PRELOAD": f"{jemalloc} libtcmalloc_minimal.so.4"})


def test_base_env_is_not_modified(jemalloc: Path) -> None:
    base = {"LD_PRELOAD": "/opt/libfoo.so"}
    allocator_env("jemalloc", base_env=base)
    assert base == {"LD_PRELOAD": "/opt/libfoo.so"}


def test_unknown_allocator_is_rejected() -> None:
    with pytest.raises(ToolError, match="'allocator' must be one of jemalloc, tcmalloc, system"):
        allocator_env("mimalloc", base_env={})


def test_allocator_of_reads_proc_maps(jemalloc: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=allocator_env("jemalloc"))
    try:
        for _ in range(1000):  # the loader maps the library right after exec: poll, briefly
            if allocator_of(child.pid) == "jemalloc":
                break
            time.sleep(0.01)
        assert allocator_of(child.pid) == "jemalloc"
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessLookupError, match="/proc/"):
        allocator_of(2**22 + 1)  # above the kernel's largest pid_max


def test_check_probe_passes_and_fails(jemalloc: Path, tmp_path: Path) -> None:
    ok = launch("--allocator", "jemalloc", "--check")
    assert ok.returncode == 0, ok.stderr
    assert "uses jemalloc" in ok.stdout
    fake = tmp_path / "libjemalloc.so.2"
    fake.write_bytes(b"not an ELF file")  # the loader ignores it: the child runs on glibc malloc
    bad = launch("--allocator", "jemalloc", "--check", env={**os.environ, "JEMALLOC_PATH": str(fake)})
    assert bad.returncode == 1
    assert "FAILED" in bad.stderr


def test_check_with_a_command_confirms_then_passes_its_exit_code(jemalloc: Path) -> None:
    result = launch("--check", "--", sys.executable, "-c", "import time, sys; time.sleep(0.2); sys.exit(3)")
    assert result.returncode == 3
    assert f"maps {jemalloc}" in result.stderr


def test_shell_wrapper(jemalloc: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(REPO / "tools" / "profile" / "with-jemalloc"), sys.executable, "-c",
         PRINT_ALLOCATOR + "; raise SystemExit(4)"],
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 4, result.stderr
    assert result.stdout.strip() == "jemalloc"

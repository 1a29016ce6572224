"""Which libjpeg the partial-decode lane decodes with: Pillow's own, its ABI checked, never a crash.

The extension links no libjpeg; at import ``loaders.read.region`` binds it to the one Pillow's
JPEG decoder (``PIL._imaging``) is linked with: the system's for Pillow-SIMD, the copy bundled
in the stock Pillow wheel. A library of another ABI, or no libjpeg at all, is refused with a
message and leaves the lane as it was. The fake libraries are compiled here from C (skipped
without a compiler or libjpeg's headers).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from loaders.read import region
from loaders.read.decode import active_backend, decode_crop_resize
from tests.samples import photo_jpeg

pytestmark = pytest.mark.skipif(not region.is_available(), reason="loaders.read._jpeg_region not built here")

# Every function the extension resolves. jpeg_CreateDecompress refuses the caller's version as
# libjpeg 8 does (JERR_BAD_LIB_VERSION through error_exit) unless ACCEPT is defined; the others
# are never called (declared without their prototypes, hence the renaming around jpeglib.h).
FAKE_LIBJPEG = textwrap.dedent("""
    #include <stdio.h>
    #include <string.h>
    #define jpeg_mem_src hidden_mem_src
    #define jpeg_read_header hidden_read_header
    #define jpeg_start_decompress hidden_start_decompress
    #define jpeg_crop_scanline hidden_crop_scanline
    #define jpeg_skip_scanlines hidden_skip_scanlines
    #define jpeg_read_scanlines hidden_read_scanlines
    #define jpeg_abort_decompress hidden_abort_decompress
    #include <jpeglib.h>
    #undef jpeg_mem_src
    #undef jpeg_read_header
    #undef jpeg_start_decompress
    #undef jpeg_crop_scanline
    #undef jpeg_skip_scanlines
    #undef jpeg_read_scanlines
    #undef jpeg_abort_decompress

    static void format_message(j_common_ptr cinfo, char *buffer) {
        snprintf(buffer, JMSG_LENGTH_MAX, "Wrong JPEG library version: library is 80, caller expects %d",
                 cinfo->err->msg_parm.i[0]);
    }
    struct jpeg_error_mgr *jpeg_std_error(struct jpeg_error_mgr *err) {
        memset(err, 0, sizeof *err);
        err->format_message = format_message;
        return err;
    }
    void jpeg_CreateDecompress(j_decompress_ptr cinfo, int version, size_t size) {
        (void)size;
        cinfo->mem = NULL;
    #ifndef ACCEPT
        cinfo->err->msg_parm.i[0] = version;
        (*cinfo->err->error_exit)((j_common_ptr)cinfo);
    #endif
    }
    void jpeg_destroy_decompress(j_decompress_ptr cinfo) { cinfo->mem = NULL; }
    void jpeg_mem_src(void) {}
    void jpeg_read_header(void) {}
    void jpeg_start_decompress(void) {}
    void jpeg_crop_scanline(void) {}
    void jpeg_skip_scanlines(void) {}
    void jpeg_read_scanlines(void) {}
    void jpeg_abort_decompress(void) {}
""")


def _compile(tmp_path: Path, name: str, *defines: str) -> str:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = tmp_path / f"{name}.c"
    source.write_text(FAKE_LIBJPEG)
    library = tmp_path / f"{name}.so"
    done = subprocess.run([compiler, "-shared", "-fPIC", *(f"-D{d}" for d in defines), "-o", str(library),
                           str(source)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot build a fake libjpeg (libjpeg headers missing?): {done.stderr[-300:]}")
    return str(library)


def _mapped_libjpegs(*, code: str) -> set[str]:
    """The real paths of the libjpeg files mapped in a fresh interpreter after running ``code``."""
    script = code + ("\nimport os\nprint('\\n'.join(sorted({os.path.realpath(line.split()[-1]) for line in "
                     "open('/proc/self/maps') if '/libjpeg' in line})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[3])
    return set(done.stdout.split())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no /proc to read the mapped libraries from")
def test_the_lane_decodes_with_the_libjpeg_pillow_loaded() -> None:
    pillows = _mapped_libjpegs(code="from PIL import Image, JpegImagePlugin\nImage.core.jpeg_decoder")
    assert len(pillows) == 1, pillows  # Pillow's JPEG decoder is linked with one libjpeg
    bound = region.libjpeg_file()
    assert bound is not None and {os.path.realpath(bound)} == pillows
    # Importing the lane loads no other copy (the extension links none).
    assert _mapped_libjpegs(code="from loaders.read import region\nassert region.is_available()") == pillows
    assert bound in region.lane_status() and "partial decode on" in active_backend()


def test_a_library_of_another_abi_is_refused_and_the_lane_keeps_its_own(tmp_path: Path) -> None:
    fake = _compile(tmp_path, "libjpeg80")
    with pytest.raises(OSError, match=r"libjpeg80\.so.*does not match.*JPEG_LIB_VERSION 62.*library is 80"):
        region._jpeg_region.bind_libjpeg(fake)
    with pytest.raises(OSError, match="no jpeg_std_error"):  # not a libjpeg at all
        region._jpeg_region.bind_libjpeg(sysconfig.get_config_var("LIBC") or "libc.so.6")
    with pytest.raises(OSError, match="cannot open"):
        region._jpeg_region.bind_libjpeg(str(tmp_path / "absent.so"))
    # A second libjpeg, however good, never replaces the bound one (decodes may be running).
    with pytest.raises(OSError, match="bound to .* already"):
        region._jpeg_region.bind_libjpeg(_compile(tmp_path, "libjpeg62", "ACCEPT"))
    assert region._jpeg_region.bind_libjpeg(Image.core.__file__) == region.libjpeg_file()
    data = photo_jpeg(120, 160)
    assert region.decode_box(data, (160, 120), 1, (10, 10, 100, 80), (32, 32), Image.Resampling.BILINEAR) is not None


def test_an_unusable_libjpeg_turns_the_lane_off_and_crops_decode_in_full(tmp_path: Path) -> None:
    # A fresh copy of the extension (its own state, unbound) in a fresh interpreter, bound to a
    # libjpeg of another ABI, as where Pillow carries a libjpeg 8: refused, then no decode, no crash.
    copy = tmp_path / Path(region._jpeg_region.__file__).name
    shutil.copy(region._jpeg_region.__file__, copy)
    fake = _compile(tmp_path, "libjpeg80")
    script = textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("_jpeg_region", {str(copy)!r})
        ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ext)
        try:
            ext.decode_region(b"", bytearray(4), 0, 0, 1, 1, 1)
        except RuntimeError as err:
            print("unbound:", err)
        from loaders.read.region import _bind_pillows_libjpeg
        class Refusing:
            bind_libjpeg = staticmethod(lambda path: ext.bind_libjpeg({fake!r}))
        print("bind:", _bind_pillows_libjpeg(Refusing()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert "unbound: decode_region: no libjpeg bound yet" in done.stdout
    assert "bind: (None, \"Pillow's libjpeg cannot serve the partial decode:" in done.stdout
    assert "library is 80" in done.stdout


def test_with_the_lane_off_crops_are_the_full_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    data = photo_jpeg(120, 160)
    fast = decode_crop_resize(data, (10, 10, 100, 80), (32, 32))
    monkeypatch.setattr(region, "_libjpeg_file", None)
    monkeypatch.setattr(region, "_lane_off_because", "test: no usable libjpeg")
    assert not region.is_available() and region.lane_status() == "off (test: no usable libjpeg)"
    assert "partial decode off (test: no usable libjpeg)" in active_backend()
    assert region.decode_box(data, (160, 120), 1, (10, 10, 100, 80), (32, 32), Image.Resampling.BILINEAR) is None
    np.testing.assert_array_equal(decode_crop_resize(data, (10, 10, 100, 80), (32, 32)), fast)

/* loaders._jpeg_region: decode one rectangle of a JPEG with libjpeg-turbo's partial decompression.
 *
 * bind_libjpeg(path) -> str: take the jpeg_* functions from the library loaded as `path` (a
 *     shared object: Pillow's PIL._imaging, whose libjpeg they are then, or a libjpeg itself)
 * decode_region(data, out, left, top, width, height, scale) -> (x, width, height)
 * pack_rgb(src, dst, width, height, flip): RGBX -> packed RGB, mirrored with flip (src: bytes,
 *     or a Pillow image's Arrow array capsule, read in place)
 *
 * This module is built against libjpeg-turbo's headers only and links no libjpeg: the
 * full-decode path decodes with whatever libjpeg Pillow carries (the system's for a
 * source build such as Pillow-SIMD; its own copy, another version, in the stock wheel),
 * and libjpeg-turbo versions differ in the last bit of some pixels. bind_libjpeg resolves
 * every function this module calls with dlsym on `path`'s handle, which searches that
 * object and the libraries it was linked with: the very copy Pillow calls. It checks the
 * ABI (jpeg_CreateDecompress refuses another JPEG_LIB_VERSION or struct size; the refusal is
 * trapped) and returns the file the functions live in; OSError when a function is missing
 * or the ABI differs, and then nothing is bound. decode_region raises RuntimeError until a
 * bind succeeded. Binding is once per process: a later call must name the same library.
 *
 * decode_region:
 *   data    the encoded JPEG (any bytes-like object)
 *   out     a writable buffer laid out as the whole image decoded at 1/scale: uint8 RGBX,
 *           4 bytes per pixel, rows of 4 * that width; only the rectangle's pixels are
 *           written, at their place (the rows below it need no room). So a resize of the
 *           buffer as the whole image, with the full decode's own box, reads the same pixels
 *           at the same coordinates as the full decode (Pillow's float arithmetic, and stock
 *           Pillow's choice of which resize pass runs first, depend on both)
 *   left, top, width, height
 *           the rectangle wanted, in pixels of the image decoded at 1/scale
 *           (scale 1, 2, 4 or 8: libjpeg's scaled IDCT, as Pillow's draft mode)
 *
 * Returns the rectangle actually decoded: its first column x (<= left: libjpeg crops
 * columns at iMCU boundaries, so the region widens to the left and right), its width and
 * its height (exactly the rows asked). Rows above the rectangle are entropy-decoded and
 * discarded (jpeg_skip_scanlines: no IDCT, no colour conversion); rows below it are never
 * read (jpeg_abort_decompress); columns outside it skip IDCT and colour conversion
 * (jpeg_crop_scanline). The decode settings are libjpeg's defaults, as Pillow's: islow
 * IDCT, fancy upsampling, so the pixels equal those of a full decode, except in the first
 * and last columns where the region was cut inside the image (the chroma upsampler treats
 * a cut as an image edge there): callers ask for a column more than they use on each side.
 *
 * Raises ValueError when libjpeg reports an error or a warning (corrupt or truncated data:
 * the caller falls back to the full decoder, which words the error), NotImplementedError
 * for JPEGs this path leaves to the full decoder (CMYK and YCCK, which Pillow converts
 * its own way; arithmetic coding, whose row skipping is less exercised), and
 * BufferError when `out` is too small. The GIL is released while decoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#ifndef JCS_EXTENSIONS
#error "libjpeg-turbo is required (JCS_EXT_RGBX)"
#endif

#define RGBX_BYTES 4

/* The libjpeg functions this module calls, typed by jpeglib.h's declarations, resolved by
 * bind_libjpeg (jpeglib.h's jpeg_create_decompress is a macro over jpeg_CreateDecompress). */
typedef struct {
    __typeof__(&jpeg_std_error) std_error;
    __typeof__(&jpeg_CreateDecompress) create_decompress;
    __typeof__(&jpeg_destroy_decompress) destroy_decompress;
    __typeof__(&jpeg_mem_src) mem_src;
    __typeof__(&jpeg_read_header) read_header;
    __typeof__(&jpeg_start_decompress) start_decompress;
    __typeof__(&jpeg_crop_scanline) crop_scanline;
    __typeof__(&jpeg_skip_scanlines) skip_scanlines;
    __typeof__(&jpeg_read_scanlines) read_scanlines;
    __typeof__(&jpeg_abort_decompress) abort_decompress;
} LibJpeg;

static const char *const LIBJPEG_NAMES[] = {
    "jpeg_std_error", "jpeg_CreateDecompress", "jpeg_destroy_decompress", "jpeg_mem_src", "jpeg_read_header",
    "jpeg_start_decompress", "jpeg_crop_scanline", "jpeg_skip_scanlines", "jpeg_read_scanlines",
    "jpeg_abort_decompress",
};
#define LIBJPEG_FUNCTIONS (sizeof LIBJPEG_NAMES / sizeof LIBJPEG_NAMES[0])
_Static_assert(sizeof(LibJpeg) == LIBJPEG_FUNCTIONS * sizeof(void (*)(void)), "one name per LibJpeg member");

static LibJpeg lib;            /* written once, by the first successful bind_libjpeg, under the GIL */
static PyObject *bound_file;   /* the file lib's functions live in; NULL until then */

typedef struct {
    struct jpeg_error_mgr base;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
} ErrorTrap;

static void trap_error(j_common_ptr cinfo) {
    ErrorTrap *trap = (ErrorTrap *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, trap->message);
    longjmp(trap->escape, 1);
}

static void trap_message(j_common_ptr cinfo, int level) {
    /* level -1: a warning (corrupt data, premature end): treated as an error here, so
     * damaged data is never returned as pixels; higher levels are trace messages. */
    if (level < 0)
        trap_error(cinfo);
}

typedef enum { OK, BAD_DATA, UNSUPPORTED, TOO_SMALL, BAD_REGION } Outcome;

typedef struct {
    const unsigned char *data;
    size_t size;
    unsigned char *out;
    size_t out_size;
    int left, top, width, height, scale;
    /* results */
    int x, out_width, out_height;
    char message[JMSG_LENGTH_MAX + 64];
} Job;

static Outcome decode(Job *job) {
    struct jpeg_decompress_struct cinfo;
    ErrorTrap trap;

    cinfo.err = lib.std_error(&trap.base);
    trap.base.error_exit = trap_error;
    trap.base.emit_message = trap_message;
    cinfo.mem = NULL;  /* what jpeg_destroy_decompress reads if jpeg_CreateDecompress fails early */
    if (setjmp(trap.escape)) {
        snprintf(job->message, sizeof job->message, "libjpeg: %s", trap.message);
        lib.destroy_decompress(&cinfo);
        return BAD_DATA;
    }
    lib.create_decompress(&cinfo, JPEG_LIB_VERSION, sizeof cinfo);
    lib.mem_src(&cinfo, job->data, (unsigned long)job->size);
    lib.read_header(&cinfo, TRUE);
    if (cinfo.arith_code || (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE
                             && cinfo.jpeg_color_space != JCS_RGB)) {
        snprintf(job->message, sizeof job->message, "%s JPEGs are not decoded on this path",
                 cinfo.arith_code ? "arithmetic-coded" : "CMYK and YCCK");
        lib.destroy_decompress(&cinfo);
        return UNSUPPORTED;
    }
    cinfo.out_color_space = JCS_EXT_RGBX;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)job->scale;
    lib.start_decompress(&cinfo);
    if (job->left < 0 || job->top < 0 || job->width <= 0 || job->height <= 0
        || (JDIMENSION)(job->left + job->width) > cinfo.output_width
        || (JDIMENSION)(job->top + job->height) > cinfo.output_height) {
        snprintf(job->message, sizeof job->message,
                 "region (left %d, top %d, width %d, height %d) does not fit the %ux%u image decoded at 1/%d",
                 job->left, job->top, job->width, job->height, cinfo.output_width, cinfo.output_height, job->scale);
        lib.destroy_decompress(&cinfo);
        return BAD_REGION;
    }
    size_t stride = (size_t)cinfo.output_width * RGBX_BYTES;
    JDIMENSION end = (JDIMENSION)(job->top + job->height);
    if (stride * end > job->out_size) {
        snprintf(job->message, sizeof job->message,
                 "output buffer holds %zu bytes, the region needs %zu (rows 0..%u of the %ux%u image decoded at 1/%d)",
                 job->out_size, stride * end, end - 1, cinfo.output_width, cinfo.output_height, job->scale);
        lib.destroy_decompress(&cinfo);
        return TOO_SMALL;
    }
    JDIMENSION x = (JDIMENSION)job->left, width = (JDIMENSION)job->width;
    if (width < cinfo.output_width)
        lib.crop_scanline(&cinfo, &x, &width);
    if (job->top > 0)
        lib.skip_scanlines(&cinfo, (JDIMENSION)job->top);
    while (cinfo.output_scanline < end) {
        JSAMPROW row = job->out + (size_t)cinfo.output_scanline * stride + (size_t)x * RGBX_BYTES;
        lib.read_scanlines(&cinfo, &row, 1);
    }
    lib.abort_decompress(&cinfo);  /* the rows below are never decoded */
    lib.destroy_decompress(&cinfo);
    job->x = (int)x;
    job->out_width = (int)width;
    job->out_height = job->height;
    return OK;
}

/* Whether `candidate` can decode with this module's structs: jpeg_CreateDecompress checks the
 * caller's JPEG_LIB_VERSION and struct size and refuses a mismatch through error_exit (trapped
 * here). Fills `message` and returns 0 on a refusal. */
static int abi_matches(const LibJpeg *candidate, char *message, size_t size) {
    struct jpeg_decompress_struct cinfo;
    ErrorTrap trap;

    cinfo.err = candidate->std_error(&trap.base);
    trap.base.error_exit = trap_error;
    trap.base.emit_message = trap_message;
    cinfo.mem = NULL;
    if (setjmp(trap.escape)) {
        snprintf(message, size, "%s", trap.message);
        candidate->destroy_decompress(&cinfo);
        return 0;
    }
    candidate->create_decompress(&cinfo, JPEG_LIB_VERSION, sizeof cinfo);
    candidate->destroy_decompress(&cinfo);
    return 1;
}

/* Fills `found` with the functions of LIBJPEG_NAMES as `handle` resolves them (the object, then
 * the libraries it was linked with, breadth first: the dynamic linker's own order): 1, or 0 with
 * OSError set naming the first one missing. */
static int resolve(void *handle, const char *path, LibJpeg *found) {
    void *symbols[LIBJPEG_FUNCTIONS];
    for (size_t k = 0; k < LIBJPEG_FUNCTIONS; k++) {
        symbols[k] = dlsym(handle, LIBJPEG_NAMES[k]);
        if (symbols[k] == NULL) {
            PyErr_Format(PyExc_OSError, "%s: no %s in it or the libraries it loads (not libjpeg-turbo >= 1.5, "
                         "or not linked with one)", path, LIBJPEG_NAMES[k]);
            return 0;
        }
    }
    memcpy(found, symbols, sizeof *found);  /* POSIX: dlsym's object pointers are function pointers */
    return 1;
}

static PyObject *bind_libjpeg(PyObject *self, PyObject *args) {
    PyObject *path_obj;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path_obj))
        return NULL;
    const char *path = PyBytes_AS_STRING(path_obj);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);  /* the same handle if it is loaded already */
    if (handle == NULL) {
        PyErr_Format(PyExc_OSError, "cannot open %s: %s", path, dlerror());
        Py_DECREF(path_obj);
        return NULL;
    }
    LibJpeg found;
    char message[JMSG_LENGTH_MAX];
    Dl_info info;
    PyObject *where = NULL;
    int keep = 0;
    if (!resolve(handle, path, &found))
        goto done;
    if (dladdr(dlsym(handle, "jpeg_CreateDecompress"), &info) == 0 || info.dli_fname == NULL) {
        PyErr_Format(PyExc_OSError, "%s: cannot tell which file jpeg_CreateDecompress comes from", path);
        goto done;
    }
    where = PyUnicode_DecodeFSDefault(info.dli_fname);
    if (where == NULL)
        goto done;
    if (!abi_matches(&found, message, sizeof message)) {
        PyErr_Format(PyExc_OSError, "%S (from %s) does not match the libjpeg headers this module was built with "
                     "(JPEG_LIB_VERSION %d): %s", where, path, JPEG_LIB_VERSION, message);
        Py_CLEAR(where);
        goto done;
    }
    if (bound_file != NULL) {  /* decode() may be running in other threads: never swap the functions */
        if (memcmp(&found, &lib, sizeof lib) != 0) {
            PyErr_Format(PyExc_OSError, "libjpeg is bound to %S already; %s resolves another (%S)", bound_file,
                         path, where);
            Py_CLEAR(where);
        }
        goto done;
    }
    lib = found;
    Py_INCREF(where);
    bound_file = where;
    keep = 1;  /* never closed: the functions must stay mapped */
done:
    Py_DECREF(path_obj);
    if (!keep)
        dlclose(handle);
    return where;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    Job job;
    memset(&job, 0, sizeof job);
    if (!PyArg_ParseTuple(args, "y*w*iiiii", &data, &out, &job.left, &job.top, &job.width, &job.height,
                          &job.scale))
        return NULL;
    if (job.scale != 1 && job.scale != 2 && job.scale != 4 && job.scale != 8) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return PyErr_Format(PyExc_ValueError, "scale must be 1, 2, 4 or 8 (got %d)", job.scale);
    }
    if (bound_file == NULL) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return PyErr_Format(PyExc_RuntimeError, "decode_region: no libjpeg bound yet (call bind_libjpeg first)");
    }
    job.data = data.buf;
    job.size = (size_t)data.len;
    job.out = out.buf;
    job.out_size = (size_t)out.len;
    Outcome outcome;
    Py_BEGIN_ALLOW_THREADS
    outcome = decode(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    switch (outcome) {
    case OK:
        return Py_BuildValue("iii", job.x, job.out_width, job.out_height);
    case UNSUPPORTED:
        PyErr_SetString(PyExc_NotImplementedError, job.message);
        return NULL;
    case TOO_SMALL:
        PyErr_SetString(PyExc_BufferError, job.message);
        return NULL;
    case BAD_REGION:
    case BAD_DATA:
    default:
        PyErr_SetString(PyExc_ValueError, job.message);
        return NULL;
    }
}

/* The Arrow C data interface's array (a stable ABI: arrow.apache.org/docs/format/CDataInterface.html).
 * Pillow (>= 11.2) exports an image of 4-byte pixels as a fixed-size list of 4 uint8 per
 * pixel, whose child holds the pixel bytes: zero-copy, valid while the capsule lives. */
struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* The RGBX bytes of `src` (a bytes-like object, or a Pillow image's "arrow_array" capsule), at
 * least `need` of them: their address, or NULL with ValueError set. `view` is filled for a
 * bytes-like source (release it), left with buf NULL for a capsule. */
static const unsigned char *rgbx_pixels(PyObject *src, Py_ssize_t need, Py_buffer *view) {
    view->buf = NULL;
    if (PyCapsule_IsValid(src, "arrow_array")) {
        const struct ArrowArray *array = PyCapsule_GetPointer(src, "arrow_array");
        const struct ArrowArray *bytes = array->n_children == 1 ? array->children[0] : NULL;
        if (array->release == NULL || array->offset != 0 || bytes == NULL || bytes->n_buffers < 2
            || bytes->buffers[1] == NULL || bytes->offset != 0 || array->length * RGBX_BYTES != bytes->length) {
            PyErr_SetString(PyExc_ValueError, "pack_rgb: the Arrow array is not one block of 4-byte pixels");
            return NULL;
        }
        if (bytes->length < need) {
            PyErr_Format(PyExc_ValueError, "pack_rgb: %zd RGBX bytes needed, got %lld", need, (long long)bytes->length);
            return NULL;
        }
        return bytes->buffers[1];
    }
    if (PyObject_GetBuffer(src, view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "pack_rgb: %zd RGBX bytes needed, got %zd", need, view->len);
        PyBuffer_Release(view);
        view->buf = NULL;
        return NULL;
    }
    return view->buf;
}

/* One row: `width` RGBX pixels -> packed RGB, mirrored with flip. 4-byte stores advancing
 * by 3 (each overwrites the previous pixel's X byte); the row's last pixel is stored byte
 * by byte so nothing is written past the row. Pixels [first, width) of the output. */
static void pack_tail(const unsigned char *row, unsigned char *o, int first, int width, int flip) {
    for (int x = first; x < width; x++) {
        const unsigned char *px = row + (size_t)(flip ? width - 1 - x : x) * RGBX_BYTES;
        memcpy(o + (size_t)x * 3, px, x < width - 1 ? 4 : 3);
    }
}

static void pack_row_plain(const unsigned char *row, unsigned char *o, int width, int flip) {
    pack_tail(row, o, 0, width, flip);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <tmmintrin.h>
/* Four pixels per step with one byte shuffle (SSSE3, chosen at import where the CPU has it):
 * a 16-byte store of which 12 bytes are kept, so it stops 6 pixels before the row's end. */
__attribute__((target("ssse3"))) static void pack_row_ssse3(const unsigned char *row, unsigned char *o, int width,
                                                             int flip) {
    const __m128i forward = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __m128i mirrored = _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1);
    int x = 0;
    for (; x + 6 <= width; x += 4) {
        const unsigned char *px = row + (size_t)(flip ? width - 4 - x : x) * RGBX_BYTES;
        __m128i four = _mm_loadu_si128((const __m128i *)px);
        _mm_storeu_si128((__m128i *)(o + (size_t)x * 3), _mm_shuffle_epi8(four, flip ? mirrored : forward));
    }
    pack_tail(row, o, x, width, flip);
}
static int has_ssse3;
#else
#define pack_row_ssse3 pack_row_plain
static const int has_ssse3 = 0;
#endif

/* pack_rgb(src, dst, width, height, flip): RGBX rows -> packed RGB rows, mirrored left-right
 * with flip; one pass, GIL released. src: the RGBX bytes (Pillow's raw RGBX export) or, with
 * no copy, the "arrow_array" capsule of a Pillow RGB/RGBX image (Image.__arrow_c_array__). */
static PyObject *pack_rgb(PyObject *self, PyObject *args) {
    PyObject *src;
    Py_buffer view, dst;
    int width, height, flip;
    if (!PyArg_ParseTuple(args, "Ow*iip", &src, &dst, &width, &height, &flip))
        return NULL;
    if (width <= 0 || height <= 0 || dst.len < (Py_ssize_t)width * height * 3) {
        PyErr_Format(PyExc_ValueError, "pack_rgb: %dx%d pixels need %zd RGB bytes (got %zd)",
                     width, height, (Py_ssize_t)width * height * 3, dst.len);
        PyBuffer_Release(&dst);
        return NULL;
    }
    const unsigned char *in = rgbx_pixels(src, (Py_ssize_t)width * height * RGBX_BYTES, &view);
    if (in == NULL) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    unsigned char *out = dst.buf;
    void (*pack_row)(const unsigned char *, unsigned char *, int, int) = has_ssse3 ? pack_row_ssse3 : pack_row_plain;
    Py_BEGIN_ALLOW_THREADS
    for (int y = 0; y < height; y++)
        pack_row(in + (size_t)y * width * RGBX_BYTES, out + (size_t)y * width * 3, width, flip);
    Py_END_ALLOW_THREADS
    if (view.buf != NULL)
        PyBuffer_Release(&view);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind_libjpeg", bind_libjpeg, METH_VARARGS,
     "bind_libjpeg(path) -> str: decode with the libjpeg that the shared object loaded as `path` (or a libjpeg "
     "itself) uses; returns that library's file. OSError if it has none, or another ABI (see the module source)."},
    {"pack_rgb", pack_rgb, METH_VARARGS,
     "pack_rgb(src, dst, width, height, flip): RGBX rows (bytes, or a Pillow image's Arrow array "
     "capsule) -> packed RGB rows in `dst`, mirrored with flip; GIL released."},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, out, left, top, width, height, scale) -> (x, width, height): decode one "
     "rectangle of a JPEG at 1/scale into `out`, laid out as the whole image in uint8 RGBX rows (see the module "
     "source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "loaders.read._jpeg_region",
    "Decode one rectangle of a JPEG with libjpeg-turbo's partial decompression (GIL released).", -1, methods,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    has_ssse3 = __builtin_cpu_supports("ssse3");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", JPEG_LIB_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

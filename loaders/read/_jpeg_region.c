/* loaders._jpeg_region: decode one rectangle of a JPEG with libjpeg-turbo's partial decompression.
 *
 * decode_region(data, out, left, top, width, height, scale) -> (x, width, height)
 * pack_rgb(src, dst, width, height, flip): RGBX -> packed RGB, mirrored with flip (src: bytes,
 *     or a Pillow image's Arrow array capsule, read in place)
 *
 *   data    the encoded JPEG (any bytes-like object)
 *   out     a writable buffer the pixels go into: uint8 RGBX rows, 4 bytes per pixel,
 *           rows packed (stride = 4 * returned width)
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

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#ifndef JCS_EXTENSIONS
#error "libjpeg-turbo is required (JCS_EXT_RGBX)"
#endif

#define RGBX_BYTES 4

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

    cinfo.err = jpeg_std_error(&trap.base);
    trap.base.error_exit = trap_error;
    trap.base.emit_message = trap_message;
    jpeg_create_decompress(&cinfo);
    if (setjmp(trap.escape)) {
        snprintf(job->message, sizeof job->message, "libjpeg: %s", trap.message);
        jpeg_destroy_decompress(&cinfo);
        return BAD_DATA;
    }
    jpeg_mem_src(&cinfo, job->data, (unsigned long)job->size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.arith_code || (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE
                             && cinfo.jpeg_color_space != JCS_RGB)) {
        snprintf(job->message, sizeof job->message, "%s JPEGs are not decoded on this path",
                 cinfo.arith_code ? "arithmetic-coded" : "CMYK and YCCK");
        jpeg_destroy_decompress(&cinfo);
        return UNSUPPORTED;
    }
    cinfo.out_color_space = JCS_EXT_RGBX;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)job->scale;
    jpeg_start_decompress(&cinfo);
    if (job->left < 0 || job->top < 0 || job->width <= 0 || job->height <= 0
        || (JDIMENSION)(job->left + job->width) > cinfo.output_width
        || (JDIMENSION)(job->top + job->height) > cinfo.output_height) {
        snprintf(job->message, sizeof job->message,
                 "region (left %d, top %d, width %d, height %d) does not fit the %ux%u image decoded at 1/%d",
                 job->left, job->top, job->width, job->height, cinfo.output_width, cinfo.output_height, job->scale);
        jpeg_destroy_decompress(&cinfo);
        return BAD_REGION;
    }
    JDIMENSION x = (JDIMENSION)job->left, width = (JDIMENSION)job->width;
    if (width < cinfo.output_width)
        jpeg_crop_scanline(&cinfo, &x, &width);
    size_t stride = (size_t)width * RGBX_BYTES;
    if (stride * (size_t)job->height > job->out_size) {
        snprintf(job->message, sizeof job->message, "output buffer holds %zu bytes, the region needs %zu",
                 job->out_size, stride * (size_t)job->height);
        jpeg_destroy_decompress(&cinfo);
        return TOO_SMALL;
    }
    if (job->top > 0)
        jpeg_skip_scanlines(&cinfo, (JDIMENSION)job->top);
    JDIMENSION end = (JDIMENSION)(job->top + job->height);
    while (cinfo.output_scanline < end) {
        JSAMPROW row = job->out + (size_t)(cinfo.output_scanline - (JDIMENSION)job->top) * stride;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_abort_decompress(&cinfo);  /* the rows below are never decoded */
    jpeg_destroy_decompress(&cinfo);
    job->x = (int)x;
    job->out_width = (int)width;
    job->out_height = job->height;
    return OK;
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
    {"pack_rgb", pack_rgb, METH_VARARGS,
     "pack_rgb(src, dst, width, height, flip): RGBX rows (bytes, or a Pillow image's Arrow array "
     "capsule) -> packed RGB rows in `dst`, mirrored with flip; GIL released."},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, out, left, top, width, height, scale) -> (x, width, height): decode one "
     "rectangle of a JPEG at 1/scale into `out` as packed uint8 RGBX rows (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "loaders._jpeg_region",
    "Decode one rectangle of a JPEG with libjpeg-turbo's partial decompression (GIL released).", -1, methods,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    has_ssse3 = __builtin_cpu_supports("ssse3");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION", LIBJPEG_TURBO_VERSION_NUMBER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

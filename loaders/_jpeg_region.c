/* loaders._jpeg_region: decode one rectangle of a JPEG with libjpeg-turbo's partial decompression.
 *
 * decode_region(data, out, left, top, width, height, scale) -> (x, width, height)
 * pack_rgb(src, dst, width, height, flip): RGBX -> packed RGB, mirrored with flip
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

/* pack_rgb(src, dst, width, height, flip): RGBX rows (Pillow's raw RGBX export) -> packed RGB rows,
 * mirrored left-right with flip; one pass. */
static PyObject *pack_rgb(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    int width, height, flip;
    if (!PyArg_ParseTuple(args, "y*w*iip", &src, &dst, &width, &height, &flip))
        return NULL;
    if (width <= 0 || height <= 0 || src.len < (Py_ssize_t)width * height * RGBX_BYTES
        || dst.len < (Py_ssize_t)width * height * 3) {
        PyErr_Format(PyExc_ValueError, "pack_rgb: %dx%d pixels need %zd RGBX and %zd RGB bytes (got %zd and %zd)",
                     width, height, (Py_ssize_t)width * height * RGBX_BYTES, (Py_ssize_t)width * height * 3,
                     src.len, dst.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    const unsigned char *in = src.buf;
    unsigned char *out = dst.buf;
    /* The GIL is kept: this is a few microseconds of copying (measured: releasing it made
     * no difference to two thread workers' throughput). */
    for (int y = 0; y < height; y++) {
        const unsigned char *row = in + (size_t)y * width * RGBX_BYTES;
        unsigned char *o = out + (size_t)y * width * 3;
        /* 4-byte stores advancing by 3: each overwrites the previous pixel's X byte; the
         * row's last pixel is stored byte by byte so nothing is written past the row. */
        if (flip) {
            for (int x = width - 1; x > 0; x--, o += 3)
                memcpy(o, row + (size_t)x * RGBX_BYTES, 4);
            memcpy(o, row, 3);
        } else {
            for (int x = 0; x < width - 1; x++, o += 3)
                memcpy(o, row + (size_t)x * RGBX_BYTES, 4);
            memcpy(o, row + (size_t)(width - 1) * RGBX_BYTES, 3);
        }
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pack_rgb", pack_rgb, METH_VARARGS,
     "pack_rgb(src, dst, width, height, flip): RGBX rows -> packed RGB rows in `dst`, mirrored with flip."},
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
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION", LIBJPEG_TURBO_VERSION_NUMBER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

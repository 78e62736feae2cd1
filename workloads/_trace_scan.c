/* The trace reader's compiled scans (workloads/compiled_scans.py: when they are used, and what stands in without).
 *
 * A trace's first read spends its time on three byte-level jobs that numpy and bytes methods do in several passes
 * each, with a Python call per pass: parsing a token array's text into ids while checking it is JSON's, counting
 * commas (ids) in a range of an earlier turn's array, and finding where two turns' arrays first differ. Each is
 * one pass here. Nothing is decided here that the full reader would decide otherwise: parse_ids returns None for
 * anything but the plain form (ids with spaces around commas), and the caller reads that line the full way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Where [start, stop) of a buffer lies, or NULL with an exception set. */
static const unsigned char *span(Py_buffer *view, Py_ssize_t start, Py_ssize_t stop)
{
    if (start < 0 || stop < start || stop > view->len) {
        PyErr_Format(PyExc_IndexError, "range [%zd, %zd) outside a buffer of %zd bytes", start, stop, view->len);
        return NULL;
    }
    return (const unsigned char *)view->buf + start;
}

/* parse_ids(buffer, start, stop, limit) -> bytes | None
 *
 * The ids of an array's text (brackets excluded) as native int32s, or None when the text is not ids (each 0 or a
 * digit run without a leading zero) separated by commas with only spaces around them, or holds an id >= limit or
 * >= 2**31, or no id at all. Every text accepted here is JSON that json.loads reads as exactly these ids. */
static PyObject *parse_ids(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop;
    long long limit;
    if (!PyArg_ParseTuple(args, "y*nnL", &view, &start, &stop, &limit))
        return NULL;
    const unsigned char *p = span(&view, start, stop);
    if (p == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *end = p + (stop - start);
    const int64_t top = limit < ((int64_t)1 << 31) ? (int64_t)limit : ((int64_t)1 << 31);
    /* At most one id per two bytes ("1,2"), plus one. */
    PyObject *out = PyBytes_FromStringAndSize(NULL, ((stop - start) / 2 + 1) * (Py_ssize_t)sizeof(int32_t));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(out);
    Py_ssize_t n = 0;
    int ok = 1;
    while (p < end && *p == ' ')
        p++;
    for (;;) {
        /* an id */
        if (p >= end || *p < '0' || *p > '9') {
            ok = 0;
            break;
        }
        int64_t value = *p++ - '0';
        /* A 0 is a whole id: a digit after it (a leading zero, not JSON) is then no comma, and refused below. */
        while (value != 0 && p < end && *p >= '0' && *p <= '9') {
            value = value * 10 + (*p++ - '0');
            if (value >= top) /* stops long before int64 could overflow */
                break;
        }
        if (value >= top) {
            ok = 0;
            break;
        }
        ids[n++] = (int32_t)value;
        while (p < end && *p == ' ')
            p++;
        if (p == end)
            break;
        if (*p != ',') {
            ok = 0;
            break;
        }
        p++;
        while (p < end && *p == ' ')
            p++;
    }
    PyBuffer_Release(&view);
    if (!ok) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out, n * (Py_ssize_t)sizeof(int32_t)) < 0)
        return NULL;
    return out;
}

/* count_byte(buffer, start, stop, byte) -> int: how many times byte occurs in [start, stop). */
static PyObject *count_byte(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop;
    unsigned char byte;
    if (!PyArg_ParseTuple(args, "y*nnb", &view, &start, &stop, &byte))
        return NULL;
    const unsigned char *p = span(&view, start, stop);
    if (p == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t count = 0, size = stop - start;
    for (Py_ssize_t i = 0; i < size; i++) /* a loop the compiler vectorises */
        count += p[i] == byte;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

/* first_difference(a, a0, b, b0, n) -> int: the first offset below n at which a[a0:] and b[b0:] differ, or n. */
static PyObject *first_difference(PyObject *self, PyObject *args)
{
    Py_buffer va, vb;
    Py_ssize_t a0, b0, n;
    if (!PyArg_ParseTuple(args, "y*ny*nn", &va, &a0, &vb, &b0, &n))
        return NULL;
    /* n > len - start, not start + n > len: a huge n must not wrap around */
    const unsigned char *pa = n < 0 || a0 < 0 || n > va.len - a0 ? NULL : span(&va, a0, a0 + n);
    const unsigned char *pb = pa == NULL || b0 < 0 || n > vb.len - b0 ? NULL : span(&vb, b0, b0 + n);
    if (pb == NULL) {
        if (n < 0)
            PyErr_SetString(PyExc_ValueError, "a negative length");
        else if (!PyErr_Occurred())
            PyErr_Format(PyExc_IndexError, "%zd bytes from %zd and %zd outside buffers of %zd and %zd bytes", n, a0,
                         b0, va.len, vb.len);
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return NULL;
    }
    Py_ssize_t at = 0;
    const Py_ssize_t block = 4096; /* memcmp (SIMD) over blocks; only the block that differs is scanned */
    while (at + block <= n && memcmp(pa + at, pb + at, (size_t)block) == 0)
        at += block;
    while (at < n && pa[at] == pb[at])
        at++;
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    return PyLong_FromSsize_t(at);
}

/* largest(buffer, itemsize) -> int: the largest of the native int32 (itemsize 4) or int64 (8) values, or -1 if none. */
static PyObject *largest(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int itemsize;
    if (!PyArg_ParseTuple(args, "y*i", &view, &itemsize))
        return NULL;
    if ((itemsize != 4 && itemsize != 8) || view.len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are no whole number of %d-byte values", view.len, itemsize);
        PyBuffer_Release(&view);
        return NULL;
    }
    /* Each value copied out (memcpy): a slice of a buffer need not be aligned for its type. */
    const unsigned char *p = (const unsigned char *)view.buf;
    long long top = -1;
    if (itemsize == 4) {
        int32_t high = INT32_MIN, value;
        for (Py_ssize_t i = 0; i < view.len; i += 4) {
            memcpy(&value, p + i, 4);
            high = value > high ? value : high;
        }
        top = view.len ? high : -1;
    } else {
        int64_t high = INT64_MIN, value;
        for (Py_ssize_t i = 0; i < view.len; i += 8) {
            memcpy(&value, p + i, 8);
            high = value > high ? value : high;
        }
        top = view.len ? high : -1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(top);
}

static PyMethodDef methods[] = {
    {"largest", largest, METH_VARARGS, "The largest of a buffer's native int32 or int64 values, or -1 if none."},
    {"parse_ids", parse_ids, METH_VARARGS, "The ids of a token array's plain text as native int32 bytes, or None."},
    {"count_byte", count_byte, METH_VARARGS, "How many times a byte occurs in a range of a buffer."},
    {"first_difference", first_difference, METH_VARARGS, "Where two buffers' ranges first differ."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_trace_scan", "The trace reader's compiled scans.", -1, methods,
};

PyMODINIT_FUNC PyInit__trace_scan(void)
{
    return PyModule_Create(&module);
}

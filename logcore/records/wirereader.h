/* A request frame read field by field, for the request decoders in C (producewire.c,
 * fetchwire.c): Kafka's primitive types with every length checked against the bytes left. The
 * errors are ValueErrors naming the byte position, the same as the Python reader's
 * (logcore.wire.primitives.WireReader). */
#ifndef SEGLOG_WIREREADER_H
#define SEGLOG_WIREREADER_H

#include <Python.h>
#include <stdint.h>
#include <structmember.h>

#include "bigendian.h"

typedef struct {
    const uint8_t *buf;
    Py_ssize_t pos;
    Py_ssize_t end;
} reader;

static inline int take(reader *r, long long n, Py_ssize_t *start) {
    *start = r->pos;
    if (n < 0 || r->pos + n > r->end) {
        PyErr_Format(PyExc_ValueError, "%lld bytes at byte %zd run past the end of the %zd-byte frame", n, r->pos,
                     r->end);
        return -1;
    }
    r->pos += (Py_ssize_t)n;
    return 0;
}

/* An unsigned varint of at most 5 bytes (no zigzag). */
static inline int read_uvarint(reader *r, long long *out) {
    Py_ssize_t pos = r->pos, at = pos;
    uint64_t raw = 0;
    for (int i = 0; i < 5; i++) {
        if (at >= r->end) {
            PyErr_Format(PyExc_ValueError, "varint runs past the end of the data: at byte %zd of the %zd-byte frame",
                         pos, r->end);
            return -1;
        }
        uint8_t b = r->buf[at++];
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            r->pos = at;
            *out = (long long)raw;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "varint longer than 5 bytes: at byte %zd of the %zd-byte frame", pos, r->end);
    return -1;
}

/* A length prefix, -1 for null: a varint of length + 1 when flexible, else int32 or int16. */
static inline int read_length(reader *r, int flexible, int wide, long long *n) {
    Py_ssize_t start;
    if (flexible) {
        if (read_uvarint(r, n) < 0)
            return -1;
        *n -= 1;
        return 0;
    }
    if (take(r, wide ? 4 : 2, &start) < 0)
        return -1;
    *n = wide ? be32(r->buf + start) : be16(r->buf + start);
    if (*n < -1) {
        PyErr_Format(PyExc_ValueError, "negative length %lld at byte %zd", *n, start);
        return -1;
    }
    return 0;
}

static inline int read_array_length(reader *r, int flexible, Py_ssize_t *count) {
    long long n;
    if (read_length(r, flexible, 1, &n) < 0)
        return -1;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "null array at byte %zd", r->pos);
        return -1;
    }
    if (n > r->end - r->pos) { /* every element takes at least one byte */
        PyErr_Format(PyExc_ValueError, "array of %lld elements at byte %zd cannot fit the frame", n, r->pos);
        return -1;
    }
    *count = (Py_ssize_t)n;
    return 0;
}

/* The n bytes at `start` as a str; `what` names them in the error when they are not UTF-8. */
static inline PyObject *utf8_at(const reader *r, Py_ssize_t start, Py_ssize_t n, const char *what) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->buf + start, n, NULL);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyErr_Format(PyExc_ValueError, "%s at byte %zd is not UTF-8: %S", what, start, value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return s;
}

/* A nullable string: a new reference (None for null), NULL with an error set. */
static inline PyObject *read_string(reader *r, int flexible) {
    long long n;
    Py_ssize_t start;
    if (read_length(r, flexible, 0, &n) < 0)
        return NULL;
    if (n < 0)
        Py_RETURN_NONE;
    if (take(r, n, &start) < 0)
        return NULL;
    return utf8_at(r, start, (Py_ssize_t)n, "string");
}

static inline int skip_tagged_fields(reader *r) {
    long long count, tag, size;
    Py_ssize_t start;
    if (r->pos < r->end && r->buf[r->pos] == 0) { /* no tagged field: nearly always */
        r->pos++;
        return 0;
    }
    if (read_uvarint(r, &count) < 0)
        return -1;
    for (long long i = 0; i < count; i++)
        if (read_uvarint(r, &tag) < 0 || read_uvarint(r, &size) < 0 || take(r, size, &start) < 0)
            return -1;
    return 0;
}

/* An instance of the slotted class `cls` with its fields set, without running its __init__ (a
 * Python frame per object otherwise); the fields are set as object.__setattr__ sets them, so a
 * frozen dataclass takes them too. Steals the references in `values` (NULLs are skipped: the
 * caller's error). */
static inline PyObject *build(PyObject *cls, PyObject *const *names, PyObject **values, int n) {
    static PyObject *no_args = NULL;
    PyObject *obj = NULL;
    if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
        goto done;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "a request decoder needs classes");
        goto done;
    }
    obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_args, NULL);
    for (int i = 0; obj != NULL && i < n; i++) {
        /* A slot (a member descriptor of an object field, as __slots__ makes): written in place,
         * as its descriptor's __set__ would; anything else through object.__setattr__. */
        PyObject *descr = _PyType_Lookup((PyTypeObject *)cls, names[i]);
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
            ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
            !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY)) {
            PyObject **slot = (PyObject **)((char *)obj + ((PyMemberDescrObject *)descr)->d_member->offset);
            Py_XSETREF(*slot, values[i]);
            values[i] = NULL; /* stolen by the slot */
        } else if (PyObject_GenericSetAttr(obj, names[i], values[i]) < 0) {
            Py_CLEAR(obj);
        }
    }
done:
    for (int i = 0; i < n; i++)
        Py_XDECREF(values[i]);
    return obj;
}

/* One struct of an array (read_array); `ctx` is the decoder's (its classes, ...). A new
 * reference, NULL with an error set. */
typedef PyObject *(*read_item)(reader *r, int flexible, const void *ctx);

/* An array of structs, each read by `read_one` and followed by its tagged fields when flexible:
 * a list, or a tuple when `tuple` is set. */
static inline PyObject *read_array(reader *r, int flexible, int tuple, read_item read_one, const void *ctx) {
    Py_ssize_t count;
    if (read_array_length(r, flexible, &count) < 0)
        return NULL;
    PyObject *seq = tuple ? PyTuple_New(count) : PyList_New(count);
    for (Py_ssize_t i = 0; seq != NULL && i < count; i++) {
        PyObject *item = read_one(r, flexible, ctx);
        if (item == NULL) {
            Py_CLEAR(seq);
            break;
        }
        if (tuple)
            PyTuple_SET_ITEM(seq, i, item);
        else
            PyList_SET_ITEM(seq, i, item);
        if (flexible && skip_tagged_fields(r) < 0)
            Py_CLEAR(seq);
    }
    return seq;
}

/* The request header after api key and version: the correlation id and the client id (header
 * v1/v2: never a compact string; None for null), then the header's tagged fields when flexible.
 * Leaves r->pos after the header. */
static inline int read_request_header(reader *r, int flexible, int32_t *correlation_id, PyObject **client_id) {
    Py_ssize_t start;
    if (r->end < 10) {
        PyErr_Format(PyExc_ValueError, "a %zd-byte frame is shorter than a request header", r->end);
        return -1;
    }
    *correlation_id = be32(r->buf + 4);
    int16_t n = be16(r->buf + 8);
    r->pos = 10;
    if (n >= 0) {
        if (take(r, n, &start) < 0 || (*client_id = utf8_at(r, start, n, "client id")) == NULL)
            return -1;
    } else {
        *client_id = Py_NewRef(Py_None);
    }
    if (flexible && skip_tagged_fields(r) < 0) {
        Py_CLEAR(*client_id);
        return -1;
    }
    return 0;
}

#endif

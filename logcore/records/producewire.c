/*
 * Produce requests decoded and Produce responses encoded in C (v3..v10), for
 * logcore.wire.produce_codec: part of the _fastcodec module (its method table lists these two).
 *
 * A Java producer's request carries one small batch per partition, so the broker decodes and
 * answers a request for every 16 KiB per partition; done field by field in Python that was
 * about a hundred interpreted calls per request. The byte layouts are Kafka's ProduceRequest
 * and ProduceResponse schemas; the request is read with wirereader.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "bigendian.h"
#include "producewire.h"
#include "wirereader.h"
#include "wirewriter.h"

#define FLEXIBLE_FROM 9

/* ------------------------------------------------------------------------------ the request */

static PyObject *field_names[8];
enum { F_INDEX, F_RECORDS, F_NAME, F_PARTITION_DATA, F_TRANSACTIONAL_ID, F_ACKS, F_TIMEOUT_MS, F_TOPIC_DATA };

int producewire_init(void) {
    static const char *names[8] = {"index", "records", "name", "partition_data",
                                   "transactional_id", "acks", "timeout_ms", "topic_data"};
    for (int i = 0; i < 8; i++)
        if ((field_names[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

/* A view of frame[start:start + n] (the view `whole` is memoryview(frame)). */
static PyObject *subview(PyObject *whole, Py_ssize_t start, Py_ssize_t n) {
    PyObject *lo = PyLong_FromSsize_t(start), *hi = PyLong_FromSsize_t(start + n), *slice = NULL, *out = NULL;
    if (lo != NULL && hi != NULL && (slice = PySlice_New(lo, hi, NULL)) != NULL)
        out = PyObject_GetItem(whole, slice);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(slice);
    return out;
}

/* What the item readers need: the frame's memoryview and (topic class, partition class). */
typedef struct {
    PyObject *whole;
    PyObject *const *classes;
} produce_ctx;

/* One partition: its index and its records, a view of the frame (None when null). */
static PyObject *read_partition(reader *r, int flexible, const void *ctx) {
    const produce_ctx *c = ctx;
    Py_ssize_t start;
    long long n;
    PyObject *values[2] = {NULL, NULL};
    if (take(r, 4, &start) < 0 || read_length(r, flexible, 1, &n) < 0)
        return NULL;
    values[0] = PyLong_FromLong(be32(r->buf + start));
    if (n < 0)
        values[1] = Py_NewRef(Py_None);
    else if (take(r, n, &start) == 0)
        values[1] = subview(c->whole, start, (Py_ssize_t)n);
    if (values[0] == NULL || values[1] == NULL) {
        Py_XDECREF(values[0]);
        Py_XDECREF(values[1]);
        return NULL;
    }
    return build(c->classes[1], field_names + F_INDEX, values, 2);
}

/* One topic: its name (never null) and its partitions. */
static PyObject *read_topic(reader *r, int flexible, const void *ctx) {
    const produce_ctx *c = ctx;
    PyObject *values[2];
    if ((values[0] = read_string(r, flexible)) == NULL)
        return NULL;
    if (values[0] == Py_None) {
        Py_DECREF(values[0]);
        PyErr_Format(PyExc_ValueError, "null topic name at byte %zd", r->pos);
        return NULL;
    }
    if ((values[1] = read_array(r, flexible, 0, read_partition, ctx)) == NULL) {
        Py_DECREF(values[0]);
        return NULL;
    }
    return build(c->classes[0], field_names + F_NAME, values, 2);
}

PyObject *decode_produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_produce_request(frame, version, body_cls, topic_cls, partition_cls)");
        return NULL;
    }
    int version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    int flexible = version >= FLEXIBLE_FROM;
    PyObject *whole = PyMemoryView_FromObject(args[0]), *client_id = NULL, *result = NULL;
    if (whole == NULL)
        return NULL;
    Py_buffer *view = PyMemoryView_GET_BUFFER(whole);
    if (!PyBuffer_IsContiguous(view, 'C') || view->itemsize != 1) {
        PyErr_SetString(PyExc_ValueError, "a Produce request frame must be a contiguous byte buffer");
        goto done;
    }
    reader r = {view->buf, 0, view->len};
    Py_ssize_t start;
    int32_t correlation_id;
    if (read_request_header(&r, flexible, &correlation_id, &client_id) < 0)
        goto done;
    PyObject *values[4] = {NULL, NULL, NULL, NULL};
    produce_ctx ctx = {whole, args + 3};
    if ((values[0] = read_string(&r, flexible)) == NULL)
        goto done;
    if (take(&r, 6, &start) < 0) {
        Py_DECREF(values[0]);
        goto done;
    }
    values[1] = PyLong_FromLong(be16(r.buf + start));
    values[2] = PyLong_FromLong(be32(r.buf + start + 2));
    if (values[1] != NULL && values[2] != NULL)
        values[3] = read_array(&r, flexible, 0, read_topic, &ctx);
    if (values[3] == NULL || (flexible && skip_tagged_fields(&r) < 0)) {
        for (int i = 0; i < 4; i++)
            Py_XDECREF(values[i]);
        goto done;
    }
    PyObject *body = build(args[2], field_names + F_TRANSACTIONAL_ID, values, 4);
    if (body != NULL) {
        result = Py_BuildValue("(iON)", correlation_id, client_id, body);
    }
done:
    Py_XDECREF(client_id);
    Py_DECREF(whole);
    return result;
}

/* ----------------------------------------------------------------------------- the response */

static int as_int(PyObject *seq, Py_ssize_t i, long long lo, long long hi, long long *out) {
    PyObject *item = PySequence_GetItem(seq, i);
    if (item == NULL)
        return -1;
    *out = PyLong_AsLongLong(item);
    Py_DECREF(item);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (*out < lo || *out > hi) {
        PyErr_Format(PyExc_ValueError, "Produce response field %zd: %lld is out of range", i, *out);
        return -1;
    }
    return 0;
}

/* One partition: (index, error_code, base_offset, log_append_time, log_start_offset,
 * error_message[, record_errors as (batch_index, message) pairs]). */
static int put_partition(wbuf *b, PyObject *p, int version, int flexible) {
    long long index, code, base_offset, append_time, start_offset = -1;
    if (!PyTuple_Check(p) && !PyList_Check(p)) {
        PyErr_SetString(PyExc_TypeError, "a Produce response partition must be a tuple");
        return -1;
    }
    Py_ssize_t fields = PySequence_Size(p);
    if (fields < 6) {
        PyErr_SetString(PyExc_ValueError, "a Produce response partition needs 6 fields");
        return -1;
    }
    if (as_int(p, 0, INT32_MIN, INT32_MAX, &index) < 0 || as_int(p, 1, INT16_MIN, INT16_MAX, &code) < 0 ||
        as_int(p, 2, INT64_MIN, INT64_MAX, &base_offset) < 0 || as_int(p, 3, INT64_MIN, INT64_MAX, &append_time) < 0 ||
        (version >= 5 && as_int(p, 4, INT64_MIN, INT64_MAX, &start_offset) < 0) || reserve(b, 32) < 0)
        return -1;
    put_int(b, (uint64_t)index, 4);
    put_int(b, (uint64_t)code, 2);
    put_int(b, (uint64_t)base_offset, 8);
    put_int(b, (uint64_t)append_time, 8);
    if (version >= 5)
        put_int(b, (uint64_t)start_offset, 8);
    if (version >= 8) {
        int ok = -1;
        PyObject *message = PySequence_GetItem(p, 5), *errors = NULL, *list = NULL;
        if (message == NULL)
            return -1;
        if (message != Py_None && !PyUnicode_Check(message)) {
            PyErr_SetString(PyExc_TypeError, "a Produce response error message must be a str or None");
            goto partition_done;
        }
        if (fields > 6 && (errors = PySequence_GetItem(p, 6)) == NULL)
            goto partition_done;
        if (errors != NULL && (list = PySequence_Fast(errors, "record errors must be a sequence")) == NULL)
            goto partition_done;
        Py_ssize_t count = list == NULL ? 0 : PySequence_Fast_GET_SIZE(list);
        if (put_length(b, count, flexible, 1) < 0)
            goto partition_done;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(list, i), *batch_message;
            long long batch_index;
            if (PySequence_Size(pair) != 2) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a record error is a (batch_index, message) pair");
                goto partition_done;
            }
            if (as_int(pair, 0, INT32_MIN, INT32_MAX, &batch_index) < 0 || reserve(b, 5) < 0)
                goto partition_done;
            put_int(b, (uint64_t)batch_index, 4);
            if ((batch_message = PySequence_GetItem(pair, 1)) == NULL)
                goto partition_done;
            int failed = put_string(b, batch_message, flexible);
            Py_DECREF(batch_message);
            if (failed < 0)
                goto partition_done;
            if (flexible)
                b->p[b->len++] = 0; /* reserved with the index */
        }
        ok = put_string(b, message, flexible);
    partition_done:
        Py_XDECREF(list);
        Py_XDECREF(errors);
        Py_DECREF(message);
        if (ok < 0)
            return -1;
    }
    if (flexible) {
        if (reserve(b, 1) < 0)
            return -1;
        b->p[b->len++] = 0; /* partition tagged fields */
    }
    return 0;
}

static int put_topics(wbuf *b, PyObject *topics, int version, int flexible) {
    PyObject *list = PySequence_Fast(topics, "topics must be a sequence of (name, partitions)");
    if (list == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(list);
    int ok = put_length(b, count, flexible, 1);
    for (Py_ssize_t t = 0; ok == 0 && t < count; t++) {
        PyObject *topic = PySequence_Fast_GET_ITEM(list, t), *name, *partitions, *parts;
        ok = -1;
        if (!PyTuple_Check(topic) || PyTuple_GET_SIZE(topic) != 2) {
            PyErr_SetString(PyExc_TypeError, "a Produce response topic must be a (name, partitions) tuple");
            break;
        }
        name = PyTuple_GET_ITEM(topic, 0);
        partitions = PyTuple_GET_ITEM(topic, 1);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "a Produce response topic name must be a str");
            break;
        }
        if (put_string(b, name, flexible) < 0 || (parts = PySequence_Fast(partitions, "partitions must be a sequence")) == NULL)
            break;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
        ok = put_length(b, n, flexible, 1);
        for (Py_ssize_t i = 0; ok == 0 && i < n; i++)
            ok = put_partition(b, PySequence_Fast_GET_ITEM(parts, i), version, flexible);
        Py_DECREF(parts);
        if (ok == 0 && flexible) {
            if ((ok = reserve(b, 1)) == 0)
                b->p[b->len++] = 0; /* topic tagged fields */
        }
    }
    Py_DECREF(list);
    return ok;
}

PyObject *encode_produce_results(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_produce_results(correlation_id, version, topics, throttle_time)");
        return NULL;
    }
    long correlation_id, version, throttle;
    if (((correlation_id = PyLong_AsLong(args[0])) == -1 && PyErr_Occurred()) ||
        ((version = PyLong_AsLong(args[1])) == -1 && PyErr_Occurred()) ||
        ((throttle = PyLong_AsLong(args[3])) == -1 && PyErr_Occurred()))
        return NULL;
    if (version < 3 || version > 10) {
        PyErr_Format(PyExc_ValueError, "Produce response version %ld is not encoded here (3..10)", version);
        return NULL;
    }
    int flexible = version >= FLEXIBLE_FROM;
    wbuf b = {PyMem_Malloc(256), 0, 256};
    PyObject *out = NULL;
    if (b.p == NULL)
        return PyErr_NoMemory();
    put_int(&b, 0, 4); /* size prefix, filled in at the end */
    put_int(&b, (uint64_t)correlation_id, 4);
    if (flexible)
        b.p[b.len++] = 0; /* response header tagged fields */
    if (put_topics(&b, args[2], version, flexible) == 0 && reserve(&b, 5) == 0) {
        put_int(&b, (uint64_t)throttle, 4);
        if (flexible)
            b.p[b.len++] = 0; /* response tagged fields */
        Py_ssize_t size = b.len - 4;
        b.len = 0;
        put_int(&b, (uint64_t)size, 4);
        out = PyBytes_FromStringAndSize(b.p, size + 4);
    }
    PyMem_Free(b.p);
    return out;
}

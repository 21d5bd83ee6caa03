/*
 * Fetch requests decoded (v4..v16) and Fetch responses encoded (v4..v16) in C, for
 * logcore.wire.fetch_request and logcore.broker.fetch_response: part of the _fastcodec module
 * (its method table lists decode_fetch_request and encode_fetch_response).
 *
 * On three brokers every record costs the leader four or more Fetch requests (each follower's,
 * the consumers'); kio's reader took 3-5 us for each, most of it in building the dataclass
 * tree. This decoder builds the same kio dataclasses (made without their __init__, fields set
 * as object.__setattr__ sets them), so the handlers see the same request. The byte layout is
 * Kafka's FetchRequest schema; the frame is read with wirereader.h (ValueErrors naming the
 * byte position). The response encoder writes the fields the Python encoder wrote (about 4-6 us a
 * response), with the same pieces: each partition's records after their length prefix either
 * copied into the fields (bytes up to inline_max) or a piece of their own (a FileSlice, which the
 * server sends with sendfile, or larger bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>

#include "bigendian.h"
#include "fetchwire.h"
#include "wirereader.h"
#include "wirewriter.h"

#define FLEXIBLE_FROM 12
#define TOPIC_IDS_FROM 13
#define REPLICA_STATE_FROM 15

enum {
    N_REPLICA_ID, N_MAX_WAIT, N_MIN_BYTES, N_MAX_BYTES, N_ISOLATION_LEVEL, N_SESSION_ID, N_SESSION_EPOCH, N_TOPICS,
    N_FORGOTTEN, N_RACK_ID, N_CLUSTER_ID, N_REPLICA_STATE, N_TOPIC, N_TOPIC_ID, N_PARTITIONS, N_PARTITION,
    N_CURRENT_LEADER_EPOCH, N_FETCH_OFFSET, N_LAST_FETCHED_EPOCH, N_LOG_START_OFFSET, N_PARTITION_MAX_BYTES,
    N_REPLICA_EPOCH, N_INT, N_IS_SAFE, N_COUNT
};
static PyObject *names[N_COUNT];
static int response_keys_init(void);

int fetchwire_init(void) {
    static const char *text[N_COUNT] = {
        "replica_id", "max_wait", "min_bytes", "max_bytes", "isolation_level", "session_id", "session_epoch",
        "topics", "forgotten_topics_data", "rack_id", "cluster_id", "replica_state", "topic", "topic_id",
        "partitions", "partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch",
        "log_start_offset", "partition_max_bytes", "replica_epoch", "int", "is_safe"};
    for (int i = 0; i < N_COUNT; i++)
        if ((names[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return -1;
    PyDateTime_IMPORT;
    return PyDateTimeAPI == NULL ? -1 : response_keys_init();
}

/* The classes of the version decoded, as decode_fetch_request takes them. */
enum { C_REQUEST, C_TOPIC, C_PARTITION, C_FORGOTTEN, C_REPLICA_STATE, C_UUID, C_UUID_UNKNOWN, C_COUNT };

typedef struct {
    int version;
    PyObject *const *classes;
} fetch_ctx;

/* Names and values of a struct's fields, filled in schema order. */
typedef struct {
    PyObject *names[12];
    PyObject *values[12];
    int n;
} fields;

static void add(fields *f, int name, PyObject *value) {
    f->names[f->n] = names[name];
    f->values[f->n++] = value;
}

static PyObject *made(PyObject *cls, fields *f) {
    for (int i = 0; i < f->n; i++)
        if (f->values[i] == NULL) {
            for (int j = 0; j < f->n; j++)
                Py_XDECREF(f->values[j]);
            return NULL;
        }
    return build(cls, f->names, f->values, f->n);
}

static PyObject *int32_at(reader *r) {
    Py_ssize_t start;
    return take(r, 4, &start) < 0 ? NULL : PyLong_FromLong(be32(r->buf + start));
}

/* A topic name, which is never null. */
static PyObject *name_at(reader *r, int flexible, const char *what) {
    PyObject *s = read_string(r, flexible);
    if (s == Py_None) {
        Py_DECREF(s);
        PyErr_Format(PyExc_ValueError, "null %s at byte %zd", what, r->pos);
        return NULL;
    }
    return s;
}

/* A uuid.UUID as kio reads it: None for the all-zero id. */
static PyObject *uuid_at(reader *r, PyObject *const *classes) {
    static PyObject *no_args = NULL, *shift = NULL;
    Py_ssize_t start;
    if (take(r, 16, &start) < 0)
        return NULL;
    uint64_t hi = (uint64_t)be64(r->buf + start), lo = (uint64_t)be64(r->buf + start + 8);
    if (hi == 0 && lo == 0)
        Py_RETURN_NONE;
    if ((no_args == NULL && (no_args = PyTuple_New(0)) == NULL) ||
        (shift == NULL && (shift = PyLong_FromLong(64)) == NULL))
        return NULL;
    PyObject *high = PyLong_FromUnsignedLongLong(hi), *low = PyLong_FromUnsignedLongLong(lo), *shifted = NULL;
    PyObject *value = NULL, *id = NULL;
    if (high != NULL && low != NULL && (shifted = PyNumber_Lshift(high, shift)) != NULL)
        value = PyNumber_Or(shifted, low);
    if (value != NULL && PyType_Check(classes[C_UUID]) &&
        (id = PyBaseObject_Type.tp_new((PyTypeObject *)classes[C_UUID], no_args, NULL)) != NULL &&
        (PyObject_GenericSetAttr(id, names[N_INT], value) < 0 ||
         PyObject_GenericSetAttr(id, names[N_IS_SAFE], classes[C_UUID_UNKNOWN]) < 0))
        Py_CLEAR(id);
    Py_XDECREF(high);
    Py_XDECREF(low);
    Py_XDECREF(shifted);
    Py_XDECREF(value);
    return id;
}

/* A topic by name (before v13) or by id. */
static PyObject *topic_at(reader *r, int flexible, const fetch_ctx *c, fields *f) {
    if (c->version >= TOPIC_IDS_FROM) {
        add(f, N_TOPIC_ID, uuid_at(r, c->classes));
    } else {
        add(f, N_TOPIC, name_at(r, flexible, "topic name"));
    }
    return f->values[f->n - 1];
}

static PyObject *read_partition(reader *r, int flexible, const void *ctx) {
    const fetch_ctx *c = ctx;
    Py_ssize_t start;
    int v = c->version;
    int size = 4 + (v >= 9 ? 4 : 0) + 8 + (v >= 12 ? 4 : 0) + (v >= 5 ? 8 : 0) + 4;
    if (take(r, size, &start) < 0)
        return NULL;
    const uint8_t *p = r->buf + start;
    fields f = {.n = 0};
    add(&f, N_PARTITION, PyLong_FromLong(be32(p)));
    p += 4;
    if (v >= 9) {
        add(&f, N_CURRENT_LEADER_EPOCH, PyLong_FromLong(be32(p)));
        p += 4;
    }
    add(&f, N_FETCH_OFFSET, PyLong_FromLongLong(be64(p)));
    p += 8;
    if (v >= 12) {
        add(&f, N_LAST_FETCHED_EPOCH, PyLong_FromLong(be32(p)));
        p += 4;
    }
    if (v >= 5) {
        add(&f, N_LOG_START_OFFSET, PyLong_FromLongLong(be64(p)));
        p += 8;
    }
    add(&f, N_PARTITION_MAX_BYTES, PyLong_FromLong(be32(p)));
    return made(c->classes[C_PARTITION], &f);
}

static PyObject *read_topic(reader *r, int flexible, const void *ctx) {
    const fetch_ctx *c = ctx;
    fields f = {.n = 0};
    if (topic_at(r, flexible, c, &f) != NULL)
        add(&f, N_PARTITIONS, read_array(r, flexible, 1, read_partition, ctx));
    return made(c->classes[C_TOPIC], &f);
}

/* A forgotten topic: the topic, then its partitions' indexes (int32s, no tagged fields). */
static PyObject *read_forgotten(reader *r, int flexible, const void *ctx) {
    const fetch_ctx *c = ctx;
    fields f = {.n = 0};
    Py_ssize_t count;
    if (topic_at(r, flexible, c, &f) != NULL && read_array_length(r, flexible, &count) == 0) {
        PyObject *indexes = PyTuple_New(count);
        for (Py_ssize_t i = 0; indexes != NULL && i < count; i++) {
            PyObject *index = int32_at(r);
            if (index == NULL)
                Py_CLEAR(indexes);
            else
                PyTuple_SET_ITEM(indexes, i, index);
        }
        add(&f, N_PARTITIONS, indexes);
    } else {
        add(&f, N_PARTITIONS, NULL);
    }
    return made(c->classes[C_FORGOTTEN], &f);
}

/* ReplicaState (tag 1, v15+): replica_id, replica_epoch, its tagged fields. */
static PyObject *replica_state(PyObject *const *classes, int32_t id, int64_t epoch) {
    fields f = {.n = 0};
    add(&f, N_REPLICA_ID, PyLong_FromLong(id));
    add(&f, N_REPLICA_EPOCH, PyLong_FromLongLong(epoch));
    return made(classes[C_REPLICA_STATE], &f);
}

/* The request's tagged fields (v12+): cluster_id (tag 0) and, v15+, replica_state (tag 1) into
 * `cluster_id` and `state` (new references). As in Kafka's own parser, a known field is read
 * as its type says (the size before it is not checked) and an unknown tag is skipped by its size. */
static int request_tags(reader *r, const fetch_ctx *c, PyObject **cluster_id, PyObject **state) {
    long long count, tag, size;
    Py_ssize_t start;
    if (read_uvarint(r, &count) < 0)
        return -1;
    for (long long i = 0; i < count; i++) {
        if (read_uvarint(r, &tag) < 0 || read_uvarint(r, &size) < 0)
            return -1;
        if (tag == 0) {
            Py_CLEAR(*cluster_id);
            if ((*cluster_id = read_string(r, 1)) == NULL)
                return -1;
        } else if (tag == 1 && c->version >= REPLICA_STATE_FROM) {
            if (take(r, 12, &start) < 0 || skip_tagged_fields(r) < 0)
                return -1;
            Py_CLEAR(*state);
            if ((*state = replica_state(c->classes, be32(r->buf + start), be64(r->buf + start + 4))) == NULL)
                return -1;
        } else if (take(r, size, &start) < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *decode_fetch_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != C_COUNT) {
        PyErr_SetString(PyExc_TypeError, "decode_fetch_request(frame, version, classes: a 7-tuple)");
        return NULL;
    }
    int version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    if (version < 4 || version > 16) {
        PyErr_Format(PyExc_ValueError, "Fetch request version %d is not decoded here (4..16)", version);
        return NULL;
    }
    fetch_ctx c = {version, &PyTuple_GET_ITEM(args[2], 0)};
    int flexible = version >= FLEXIBLE_FROM;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    reader r = {view.buf, 0, view.len};
    PyObject *client_id = NULL, *cluster_id = NULL, *state = NULL, *result = NULL;
    int32_t correlation_id;
    Py_ssize_t start;
    fields f = {.n = 0};
    if (read_request_header(&r, flexible, &correlation_id, &client_id) < 0)
        goto done;
    if (version < REPLICA_STATE_FROM) {
        add(&f, N_REPLICA_ID, int32_at(&r));
        if (f.values[0] == NULL)
            goto done;
    }
    if (take(&r, 13, &start) < 0)
        goto done;
    const uint8_t *p = r.buf + start;
    long long ms = be32(p), days = ms / 86400000, rest = ms % 86400000;
    if (rest < 0) {
        rest += 86400000;
        days -= 1;
    }
    add(&f, N_MAX_WAIT, PyDelta_FromDSU((int)days, (int)(rest / 1000), (int)(rest % 1000) * 1000));
    add(&f, N_MIN_BYTES, PyLong_FromLong(be32(p + 4)));
    add(&f, N_MAX_BYTES, PyLong_FromLong(be32(p + 8)));
    add(&f, N_ISOLATION_LEVEL, PyLong_FromLong((int8_t)p[12]));
    if (version >= 7) {
        add(&f, N_SESSION_ID, int32_at(&r));
        add(&f, N_SESSION_EPOCH, f.values[f.n - 1] == NULL ? NULL : int32_at(&r));
    }
    if (f.values[f.n - 1] == NULL)
        goto done;
    add(&f, N_TOPICS, read_array(&r, flexible, 1, read_topic, &c));
    if (version >= 7 && f.values[f.n - 1] != NULL)
        add(&f, N_FORGOTTEN, read_array(&r, flexible, 1, read_forgotten, &c));
    if (version >= 11 && f.values[f.n - 1] != NULL)
        add(&f, N_RACK_ID, name_at(&r, flexible, "rack id"));
    if (f.values[f.n - 1] == NULL)
        goto done;
    if (flexible) {
        if (request_tags(&r, &c, &cluster_id, &state) < 0)
            goto done;
        add(&f, N_CLUSTER_ID, cluster_id != NULL ? cluster_id : Py_NewRef(Py_None));
        cluster_id = NULL;
        if (version >= REPLICA_STATE_FROM) {
            add(&f, N_REPLICA_STATE, state != NULL ? state : replica_state(c.classes, -1, -1));
            state = NULL;
        }
    }
    PyObject *body = made(c.classes[C_REQUEST], &f);
    f.n = 0;
    if (body != NULL)
        result = Py_BuildValue("(iON)", correlation_id, client_id, body);
done:
    for (int i = 0; i < f.n; i++)
        Py_XDECREF(f.values[i]);
    Py_XDECREF(client_id);
    Py_XDECREF(cluster_id);
    Py_XDECREF(state);
    PyBuffer_Release(&view);
    return result;
}

/* ----------------------------------------------------------------------------- the response */

enum {
    K_THROTTLE_TIME, K_ERROR_CODE, K_SESSION_ID, K_RESPONSES, K_TOPIC, K_TOPIC_ID, K_PARTITIONS, K_PARTITION_INDEX,
    K_HIGH_WATERMARK, K_LAST_STABLE_OFFSET, K_LOG_START_OFFSET, K_ABORTED, K_PRODUCER_ID, K_FIRST_OFFSET,
    K_PREFERRED_READ_REPLICA, K_RECORDS, K_DIVERGING_EPOCH, K_EPOCH, K_END_OFFSET, K_CURRENT_LEADER, K_LEADER_ID,
    K_LEADER_EPOCH, K_COUNT
};
static PyObject *keys[K_COUNT];

static int response_keys_init(void) {
    static const char *text[K_COUNT] = {
        "throttle_time", "error_code", "session_id", "responses", "topic", "topic_id", "partitions",
        "partition_index", "high_watermark", "last_stable_offset", "log_start_offset", "aborted_transactions",
        "producer_id", "first_offset", "preferred_read_replica", "records", "diverging_epoch", "epoch",
        "end_offset", "current_leader", "leader_id", "leader_epoch"};
    for (int i = 0; i < K_COUNT; i++)
        if ((keys[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return -1;
    return 0;
}

/* d[key] as a borrowed reference: `fallback` when absent (NULL: KeyError, as d[key] raises). */
static PyObject *field(PyObject *d, int key, PyObject *fallback) {
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "a Fetch response struct must be a dict, not %.100s", Py_TYPE(d)->tp_name);
        return NULL;
    }
    PyObject *v = PyDict_GetItemWithError(d, keys[key]);
    if (v == NULL && !PyErr_Occurred()) {
        if (fallback == NULL)
            PyErr_SetObject(PyExc_KeyError, keys[key]);
        return fallback;
    }
    return v;
}

/* d[key] (or `fallback` when absent and fallback_ok) as an integer of `width` bytes, written. */
static int put_field(wbuf *b, PyObject *d, int key, int width, int fallback_ok, long long fallback) {
    PyObject *v = PyDict_Check(d) ? PyDict_GetItemWithError(d, keys[key]) : NULL;
    long long n = fallback;
    if (v == NULL) {
        if (PyErr_Occurred() || field(d, key, fallback_ok ? Py_None : NULL) == NULL)
            return -1;
    } else if ((n = PyLong_AsLongLong(v)) == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (width < 8 && (n < -(1LL << (8 * width - 1)) || n >= (1LL << (8 * width - 1)))) {
        PyErr_Format(PyExc_ValueError, "Fetch response field %S: %lld is out of range", keys[key], n);
        return -1;
    }
    if (reserve(b, width) < 0)
        return -1;
    put_int(b, (uint64_t)n, width);
    return 0;
}

/* A list of dicts (or a tuple): new reference to a fast sequence, NULL with an error set. */
static PyObject *items(PyObject *seq, const char *what) {
    return PySequence_Fast(seq, what);
}

typedef struct {
    wbuf out;
    PyObject *pieces; /* the bytes and record objects sent after the fields written so far */
    Py_ssize_t total; /* bytes in `pieces` */
    PyObject *file_slice;
    Py_ssize_t inline_max;
    int version, flexible;
} response_writer;

/* The fields written so far as a piece, then `records` as a piece of its own. */
static int flush_then(response_writer *w, PyObject *records, Py_ssize_t size) {
    PyObject *piece = PyBytes_FromStringAndSize(w->out.p, w->out.len);
    if (piece == NULL || PyList_Append(w->pieces, piece) < 0) {
        Py_XDECREF(piece);
        return -1;
    }
    Py_DECREF(piece);
    w->total += w->out.len;
    w->out.len = 0;
    if (records != NULL) {
        if (PyList_Append(w->pieces, records) < 0)
            return -1;
        w->total += size;
    }
    return 0;
}

/* A partition's records: null, copied into the fields (bytes up to inline_max), or a piece. */
static int put_records(response_writer *w, PyObject *records) {
    wbuf *b = &w->out;
    if (records == Py_None)
        return put_length(b, -1, w->flexible, 1);
    if (PyObject_TypeCheck(records, (PyTypeObject *)w->file_slice)) {
        Py_ssize_t size = PyObject_Size(records);
        if (size < 0 || put_length(b, size, w->flexible, 1) < 0)
            return -1;
        return flush_then(w, records, size);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int ok = put_length(b, view.len, w->flexible, 1);
    if (ok == 0 && view.len > w->inline_max)
        ok = flush_then(w, records, view.len);
    else if (ok == 0 && (ok = reserve(b, view.len)) == 0)
        put_bytes(b, view.buf, view.len);
    PyBuffer_Release(&view);
    return ok;
}

/* A partition's tagged fields (v12+): 0 diverging_epoch, 1 current_leader, when given. */
static int put_partition_tags(wbuf *b, PyObject *p) {
    PyObject *diverging = field(p, K_DIVERGING_EPOCH, Py_None), *leader;
    if (diverging == NULL || (leader = field(p, K_CURRENT_LEADER, Py_None)) == NULL || reserve(b, 1) < 0)
        return -1;
    put_int(b, (diverging != Py_None) + (leader != Py_None), 1);
    if (diverging != Py_None) {
        if (reserve(b, 2) < 0)
            return -1;
        put_int(b, 0, 1);
        put_int(b, 4 + 8 + 1, 1);
        if (put_field(b, diverging, K_EPOCH, 4, 0, 0) < 0 || put_field(b, diverging, K_END_OFFSET, 8, 0, 0) < 0 ||
            reserve(b, 1) < 0)
            return -1;
        put_int(b, 0, 1);
    }
    if (leader != Py_None) {
        if (reserve(b, 2) < 0)
            return -1;
        put_int(b, 1, 1);
        put_int(b, 4 + 4 + 1, 1);
        if (put_field(b, leader, K_LEADER_ID, 4, 0, 0) < 0 || put_field(b, leader, K_LEADER_EPOCH, 4, 0, 0) < 0 ||
            reserve(b, 1) < 0)
            return -1;
        put_int(b, 0, 1);
    }
    return 0;
}

static int put_partition(response_writer *w, PyObject *p) {
    wbuf *b = &w->out;
    int v = w->version;
    if (put_field(b, p, K_PARTITION_INDEX, 4, 0, 0) < 0 || put_field(b, p, K_ERROR_CODE, 2, 0, 0) < 0 ||
        put_field(b, p, K_HIGH_WATERMARK, 8, 0, 0) < 0 || put_field(b, p, K_LAST_STABLE_OFFSET, 8, 0, 0) < 0 ||
        (v >= 5 && put_field(b, p, K_LOG_START_OFFSET, 8, 0, 0) < 0))
        return -1;
    PyObject *aborted = field(p, K_ABORTED, Py_None), *list;
    if (aborted == NULL)
        return -1;
    if (aborted == Py_None) {
        if (put_length(b, -1, w->flexible, 1) < 0)
            return -1;
    } else {
        if ((list = items(aborted, "aborted_transactions must be a sequence")) == NULL)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
        int ok = put_length(b, n, w->flexible, 1);
        for (Py_ssize_t i = 0; ok == 0 && i < n; i++) {
            PyObject *a = PySequence_Fast_GET_ITEM(list, i);
            ok = put_field(b, a, K_PRODUCER_ID, 8, 0, 0) < 0 || put_field(b, a, K_FIRST_OFFSET, 8, 0, 0) < 0 ? -1 : 0;
            if (ok == 0 && w->flexible && (ok = reserve(b, 1)) == 0)
                put_int(b, 0, 1); /* the aborted transaction's tagged fields */
        }
        Py_DECREF(list);
        if (ok < 0)
            return -1;
    }
    if (v >= 11 && put_field(b, p, K_PREFERRED_READ_REPLICA, 4, 1, -1) < 0)
        return -1;
    PyObject *records = field(p, K_RECORDS, Py_None);
    if (records == NULL || put_records(w, records) < 0)
        return -1;
    return w->flexible ? put_partition_tags(&w->out, p) : 0;
}

/* A topic's id (v13+: a uuid.UUID, or its 16 bytes) or name. */
static int put_topic_key(response_writer *w, PyObject *topic) {
    wbuf *b = &w->out;
    if (w->version < TOPIC_IDS_FROM) {
        PyObject *name = field(topic, K_TOPIC, NULL);
        return name == NULL ? -1 : put_string(b, name, w->flexible);
    }
    PyObject *id = field(topic, K_TOPIC_ID, NULL), *value;
    if (id == NULL || reserve(b, 16) < 0)
        return -1;
    if ((value = PyObject_GetAttr(id, names[N_INT])) != NULL && PyLong_Check(value)) {
        static PyObject *shift = NULL;
        PyObject *high = NULL;
        if ((shift != NULL || (shift = PyLong_FromLong(64)) != NULL) &&
            (high = PyNumber_Rshift(value, shift)) != NULL) {
            put_int(b, PyLong_AsUnsignedLongLongMask(high), 8);
            put_int(b, PyLong_AsUnsignedLongLongMask(value), 8);
        }
        Py_XDECREF(high);
        Py_DECREF(value);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_XDECREF(value);
    PyErr_Clear();
    Py_buffer view;
    if (PyObject_GetBuffer(id, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int ok = view.len == 16 ? 0 : -1;
    if (ok == 0)
        put_bytes(b, view.buf, 16);
    else
        PyErr_Format(PyExc_ValueError, "a topic id is 16 bytes, not %zd", view.len);
    PyBuffer_Release(&view);
    return ok;
}

static int put_topics(response_writer *w, PyObject *topics) {
    PyObject *list = items(topics, "responses must be a sequence of topics");
    if (list == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(list);
    int ok = put_length(&w->out, count, w->flexible, 1);
    for (Py_ssize_t t = 0; ok == 0 && t < count; t++) {
        PyObject *topic = PySequence_Fast_GET_ITEM(list, t), *partitions, *parts;
        ok = -1;
        if (put_topic_key(w, topic) < 0 || (partitions = field(topic, K_PARTITIONS, NULL)) == NULL ||
            (parts = items(partitions, "partitions must be a sequence")) == NULL)
            break;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
        ok = put_length(&w->out, n, w->flexible, 1);
        for (Py_ssize_t i = 0; ok == 0 && i < n; i++)
            ok = put_partition(w, PySequence_Fast_GET_ITEM(parts, i));
        Py_DECREF(parts);
        if (ok == 0 && w->flexible && (ok = reserve(&w->out, 1)) == 0)
            put_int(&w->out, 0, 1); /* topic tagged fields */
    }
    Py_DECREF(list);
    return ok;
}

PyObject *encode_fetch_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_fetch_response(correlation_id, version, body, file_slice_cls, inline_max)");
        return NULL;
    }
    long correlation_id = PyLong_AsLong(args[0]), version = PyLong_AsLong(args[1]);
    Py_ssize_t inline_max = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (version < 4 || version > 16) {
        PyErr_Format(PyExc_ValueError, "Fetch response version %ld is not encoded here (4..16)", version);
        return NULL;
    }
    PyObject *body = args[2], *topics, *result = NULL;
    response_writer w = {{PyMem_Malloc(256), 0, 256}, PyList_New(0), 0, args[3], inline_max, (int)version,
                         version >= FLEXIBLE_FROM};
    if (w.out.p == NULL || w.pieces == NULL) {
        if (w.out.p == NULL)
            PyErr_NoMemory();
        goto done;
    }
    put_int(&w.out, 0, 4); /* size prefix, filled in at the end */
    put_int(&w.out, (uint64_t)correlation_id, 4);
    if (w.flexible)
        put_int(&w.out, 0, 1); /* response header tagged fields */
    if (put_field(&w.out, body, K_THROTTLE_TIME, 4, 1, 0) < 0 ||
        (version >= 7 && (put_field(&w.out, body, K_ERROR_CODE, 2, 1, 0) < 0 ||
                          put_field(&w.out, body, K_SESSION_ID, 4, 1, 0) < 0)))
        goto done;
    static PyObject *no_topics = NULL;
    if (no_topics == NULL && (no_topics = PyTuple_New(0)) == NULL)
        goto done;
    if ((topics = field(body, K_RESPONSES, no_topics)) == NULL || put_topics(&w, topics) < 0)
        goto done;
    if (w.flexible) {
        if (reserve(&w.out, 1) < 0)
            goto done;
        put_int(&w.out, 0, 1); /* response tagged fields */
    }
    if (flush_then(&w, NULL, 0) < 0)
        goto done;
    char *first = PyBytes_AS_STRING(PyList_GET_ITEM(w.pieces, 0)); /* made here, not yet seen: patched */
    uint32_t size = (uint32_t)(w.total - 4);
    for (int i = 0; i < 4; i++)
        first[i] = (char)(size >> (8 * (3 - i)));
    result = Py_NewRef(w.pieces);
done:
    PyMem_Free(w.out.p);
    Py_XDECREF(w.pieces);
    return result;
}

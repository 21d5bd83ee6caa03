/*
 * _fastcodec: the per-record work of batches_to_arrow in C.
 *
 * decode_sections() walks the records of already-decompressed record sections (one per batch),
 * validates them exactly like logcore.records.batch.decode_records does, and gathers the columns
 * into Arrow-layout buffers (int64 offsets, int64 microsecond timestamps, int32 timestamp types,
 * binary key/value with int32 offsets and validity bitmaps, optional headers as
 * list<struct<key string, value binary>>). The buffers are bytearrays, or buffers from the
 * caller's allocator, that Python wraps without copying. Corrupt input raises
 * RecordError(section_index, record_index, message); nothing is ever read outside the given
 * [start, end) range of a section.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "bigendian.h"
#include "crc32c.h"
#include "fetchwire.h"
#include "wirereader.h"
#include "producewire.h"
#include "record.h"
#include "varint.h"

static PyObject *RecordError;

/* Smallest possible encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
 * valueLength, headerCount, one byte each. Bounds the number of records a section can hold. */
#define MIN_RECORD_BYTES 7
#define INT32_LIMIT 2147483647LL

typedef struct {
    PyObject *obj; /* bytearray, or a fixed-size buffer from the caller's allocator */
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
    int fixed;
} obuf;

static int obuf_init(obuf *b, Py_ssize_t cap) {
    if (cap < 64)
        cap = 64;
    b->obj = PyByteArray_FromStringAndSize(NULL, cap);
    if (b->obj == NULL)
        return -1;
    b->p = PyByteArray_AS_STRING(b->obj);
    b->len = 0;
    b->cap = cap;
    b->fixed = 0;
    return 0;
}

static int obuf_grow(obuf *b, Py_ssize_t need) {
    Py_ssize_t want = b->len + need;
    Py_ssize_t ncap = b->cap * 2;
    if (b->fixed) {
        PyErr_SetString(PyExc_SystemError, "a fixed-size output buffer cannot grow");
        return -1;
    }
    if (ncap < want)
        ncap = want;
    if (PyByteArray_Resize(b->obj, ncap) < 0)
        return -1;
    b->p = PyByteArray_AS_STRING(b->obj);
    b->cap = ncap;
    return 0;
}

/* A buffer of exactly `cap` bytes from `allocate(cap)` (a new object exporting a writable,
 * fixed-size buffer: its memory must not move while the object lives). A pooling allocator
 * (pyarrow.allocate_buffer) hands back memory it already holds, where a fresh bytearray of
 * megabytes costs a page fault per 4 KiB touched. Without an allocator: a bytearray. */
static int obuf_init_with(obuf *b, Py_ssize_t cap, PyObject *allocate) {
    Py_buffer v;
    if (allocate == NULL)
        return obuf_init(b, cap);
    if (cap < 64)
        cap = 64;
    b->obj = PyObject_CallFunction(allocate, "n", cap);
    if (b->obj == NULL)
        return -1;
    if (PyObject_GetBuffer(b->obj, &v, PyBUF_WRITABLE) < 0)
        return -1;
    if (v.len < cap) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "allocate(%zd) returned a buffer of %zd bytes", cap, v.len);
        return -1;
    }
    b->p = (char *)v.buf;
    PyBuffer_Release(&v);
    b->len = 0;
    b->cap = cap;
    b->fixed = 1;
    return 0;
}

/* Cut the buffer to the bytes written: a bytearray is resized, a fixed buffer becomes a
 * memoryview of its first `len` bytes (which keeps it alive). */
static int obuf_finish(obuf *b) {
    PyObject *view, *head;
    if (!b->fixed)
        return PyByteArray_Resize(b->obj, b->len);
    view = PyMemoryView_FromObject(b->obj);
    if (view == NULL)
        return -1;
    head = PySequence_GetSlice(view, 0, b->len);
    Py_DECREF(view);
    if (head == NULL)
        return -1;
    Py_SETREF(b->obj, head);
    b->fixed = 0;
    return 0;
}

#define ENSURE(b, n)                                                                              \
    do {                                                                                          \
        if ((b)->len + (Py_ssize_t)(n) > (b)->cap && obuf_grow((b), (Py_ssize_t)(n)) < 0)         \
            goto fail;                                                                            \
    } while (0)

typedef struct {
    PyObject *buffer;
    Py_ssize_t start, end;
    long long base_offset, base_timestamp, max_timestamp;
    int timestamp_type;
    long long count;
    Py_ssize_t crc_from; /* -1, or where the batch's CRC-covered bytes start (its CRC is the 4
                          * bytes before): checked just before the records are decoded */
} section_t;

static int parse_section(PyObject *item, section_t *s) {
    int ts_type;
    if (!PyTuple_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "each section must be a tuple");
        return -1;
    }
    s->crc_from = -1;
    if (PyTuple_GET_SIZE(item) == 9) {
        if (!PyArg_ParseTuple(item, "OnnLLLiLn", &s->buffer, &s->start, &s->end, &s->base_offset,
                              &s->base_timestamp, &s->max_timestamp, &ts_type, &s->count,
                              &s->crc_from))
            return -1;
    } else if (!PyArg_ParseTuple(item, "OnnLLLiL", &s->buffer, &s->start, &s->end, &s->base_offset,
                                 &s->base_timestamp, &s->max_timestamp, &ts_type, &s->count)) {
        return -1;
    }
    s->timestamp_type = ts_type;
    return 0;
}

static void raise_record_error(Py_ssize_t section, long long record, const char *message) {
    PyObject *args = Py_BuildValue("(nLs)", section, record, message);
    if (args != NULL) {
        PyErr_SetObject(RecordError, args);
        Py_DECREF(args);
    }
}

#define CORRUPT(msg)                                                                              \
    do {                                                                                          \
        errmsg = (msg);                                                                           \
        goto corrupt;                                                                             \
    } while (0)

static PyObject *decode_sections(PyObject *self, PyObject *args) {
    PyObject *sections;
    long long min_offset, max_offset;
    int include_headers;
    Py_ssize_t nsec, si;
    Py_ssize_t data_cap = 0, row_cap = 0;
    obuf offs = {0}, tss = {0}, tst = {0}, kvalid = {0}, koffs = {0}, kdata = {0};
    obuf vvalid = {0}, voffs = {0}, vdata = {0};
    obuf lvalid = {0}, loffs = {0}, hkoffs = {0}, hkdata = {0}, hvvalid = {0}, hvoffs = {0},
         hvdata = {0};
    Py_ssize_t rows = 0, key_nulls = 0, value_nulls = 0, list_nulls = 0, hrows = 0,
               hvalue_nulls = 0;
    Py_buffer view;
    int have_view = 0;
    const char *errmsg = NULL;
    long long record_index = 0;
    PyObject *result = NULL;
    PyObject *allocate = NULL;
    int copy_data = 1;

    if (!PyArg_ParseTuple(args, "O!LLp|Op", &PyList_Type, &sections, &min_offset, &max_offset,
                          &include_headers, &allocate, &copy_data))
        return NULL;
    if (allocate == Py_None)
        allocate = NULL;
    nsec = PyList_GET_SIZE(sections);

    /* First pass: bounds on rows and data bytes, so per-record arrays never grow. */
    for (si = 0; si < nsec; si++) {
        section_t s;
        Py_ssize_t len, bound;
        if (parse_section(PyList_GET_ITEM(sections, si), &s) < 0)
            return NULL;
        if (s.start < 0 || s.end < s.start) {
            PyErr_SetString(PyExc_ValueError, "bad section range");
            return NULL;
        }
        len = s.end - s.start;
        bound = len / MIN_RECORD_BYTES;
        if (s.count >= 0 && s.count < bound)
            bound = (Py_ssize_t)s.count;
        row_cap += bound;
        data_cap += len;
    }

    /* Sized to the bounds up front, so these never grow and may come from `allocate`. */
    if (obuf_init_with(&offs, row_cap * 8, allocate) < 0 ||
        obuf_init_with(&tss, row_cap * 8, allocate) < 0 ||
        obuf_init_with(&tst, row_cap * 4, allocate) < 0 ||
        obuf_init_with(&kvalid, row_cap / 8 + 1, allocate) < 0 ||
        obuf_init_with(&koffs, (row_cap + 1) * 4, allocate) < 0 ||
        obuf_init_with(&kdata, copy_data ? data_cap : 0, allocate) < 0 ||
        obuf_init_with(&vvalid, row_cap / 8 + 1, allocate) < 0 ||
        obuf_init_with(&voffs, (row_cap + 1) * 4, allocate) < 0 ||
        obuf_init_with(&vdata, copy_data ? data_cap : 0, allocate) < 0)
        goto fail;
    memset(kvalid.p, 0, kvalid.cap);
    memset(vvalid.p, 0, vvalid.cap);
    ((int32_t *)koffs.p)[0] = 0;
    ((int32_t *)voffs.p)[0] = 0;
    if (include_headers) {
        if (obuf_init(&lvalid, row_cap / 8 + 1) < 0 || obuf_init(&loffs, (row_cap + 1) * 4) < 0 ||
            obuf_init(&hkoffs, 1024) < 0 || obuf_init(&hkdata, 1024) < 0 ||
            obuf_init(&hvvalid, 128) < 0 || obuf_init(&hvoffs, 1024) < 0 ||
            obuf_init(&hvdata, 1024) < 0)
            goto fail;
        memset(lvalid.p, 0, lvalid.cap);
        ((int32_t *)loffs.p)[0] = 0;
        ((int32_t *)hkoffs.p)[0] = 0;
        ((int32_t *)hvoffs.p)[0] = 0;
        hkoffs.len = hvoffs.len = 4;
    }

    {
        int64_t *o_off = (int64_t *)offs.p;
        int64_t *o_ts = (int64_t *)tss.p;
        int32_t *o_tst = (int32_t *)tst.p;
        uint8_t *o_kvalid = (uint8_t *)kvalid.p, *o_vvalid = (uint8_t *)vvalid.p;
        int32_t *o_koffs = (int32_t *)koffs.p, *o_voffs = (int32_t *)voffs.p;
        char *o_kdata = kdata.p, *o_vdata = vdata.p;
        Py_ssize_t kd_len = 0, vd_len = 0;

        for (si = 0; si < nsec; si++) {
            section_t s;
            const uint8_t *p, *e;
            long long r;
            int log_append = 0;
            record_index = 0;
            if (parse_section(PyList_GET_ITEM(sections, si), &s) < 0)
                goto fail;
            if (PyObject_GetBuffer(s.buffer, &view, PyBUF_SIMPLE) < 0)
                goto fail;
            have_view = 1;
            if (s.end > view.len) {
                PyErr_SetString(PyExc_ValueError, "section range past the end of its buffer");
                goto fail;
            }
            if (s.crc_from >= 0) {
                /* The whole batch, right before its records are read: they are then in cache. */
                const uint8_t *b = (const uint8_t *)view.buf;
                if (s.crc_from < 4 || s.crc_from > s.start) {
                    PyErr_SetString(PyExc_ValueError, "bad CRC range for a section");
                    goto fail;
                }
                if ((uint32_t)be32(b + s.crc_from - 4) != crc32c_of(b + s.crc_from, s.end - s.crc_from)) {
                    record_index = -1;
                    errmsg = "CRC mismatch";
                    goto corrupt;
                }
            }
            if (s.count < 0)
                CORRUPT("negative record count");
            log_append = s.timestamp_type == 1;
            p = (const uint8_t *)view.buf + s.start;
            e = (const uint8_t *)view.buf + s.end;

            for (r = 0; r < s.count; r++) {
                record_view rv;
                int32_t klen, vlen, hcount, i;
                int64_t ts_delta, offset, ts;
                const uint8_t *kptr, *vptr;
                int keep;
                record_index = r;
                if ((errmsg = parse_record(&p, e, &rv)) != NULL)
                    goto corrupt;
                klen = rv.klen;
                vlen = rv.vlen;
                hcount = rv.hcount;
                kptr = rv.key;
                vptr = rv.value;
                ts_delta = rv.ts_delta;
                offset = (int64_t)((uint64_t)s.base_offset + (uint64_t)(int64_t)rv.offset_delta);
                keep = offset >= min_offset && offset < max_offset;

                if (include_headers && keep) {
                    /* The headers were checked by parse_record: read them again to copy them. */
                    const uint8_t *h = rv.headers;
                    for (i = 0; i < hcount; i++) {
                        int32_t hklen = 0, hvlen = -1;
                        const uint8_t *hk, *hv;
                        read_varint(&h, p, &hklen);
                        hk = h;
                        h += hklen;
                        read_varint(&h, p, &hvlen);
                        hv = h;
                        if (hvlen > 0)
                            h += hvlen;
                        ENSURE(&hkdata, hklen);
                        memcpy(hkdata.p + hkdata.len, hk, hklen);
                        hkdata.len += hklen;
                        if (hkdata.len > INT32_LIMIT) {
                            PyErr_SetString(PyExc_OverflowError,
                                            "more than 2 GiB of header keys for one Arrow batch");
                            goto fail;
                        }
                        ENSURE(&hkoffs, 4);
                        *(int32_t *)(hkoffs.p + hkoffs.len) = (int32_t)hkdata.len;
                        hkoffs.len += 4;
                        if ((hrows & 7) == 0) {
                            ENSURE(&hvvalid, 1);
                            hvvalid.p[hvvalid.len++] = 0;
                        }
                        if (hvlen >= 0) {
                            ENSURE(&hvdata, hvlen);
                            memcpy(hvdata.p + hvdata.len, hv, hvlen);
                            hvdata.len += hvlen;
                            if (hvdata.len > INT32_LIMIT) {
                                PyErr_SetString(PyExc_OverflowError,
                                                "more than 2 GiB of header values for one Arrow batch");
                                goto fail;
                            }
                            hvvalid.p[hrows >> 3] |= (char)(1 << (hrows & 7));
                        } else {
                            hvalue_nulls++;
                        }
                        ENSURE(&hvoffs, 4);
                        *(int32_t *)(hvoffs.p + hvoffs.len) = (int32_t)hvdata.len;
                        hvoffs.len += 4;
                        hrows++;
                    }
                }
                if (!keep)
                    continue;

                if (log_append)
                    ts = s.max_timestamp;
                else
                    ts = (int64_t)((uint64_t)s.base_timestamp + (uint64_t)ts_delta);
                o_off[rows] = offset;
                o_ts[rows] = (int64_t)((uint64_t)ts * 1000u);
                o_tst[rows] = s.timestamp_type;
                if (klen >= 0) {
                    if (kd_len + klen > INT32_LIMIT) {
                        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys for one Arrow batch");
                        goto fail;
                    }
                    if (copy_data) {
                        memcpy(o_kdata + kd_len, kptr, klen);
                        kd_len += klen;
                    }
                    o_kvalid[rows >> 3] |= (uint8_t)(1 << (rows & 7));
                } else {
                    key_nulls++;
                }
                o_koffs[rows + 1] = (int32_t)kd_len;
                if (vlen >= 0) {
                    if (vd_len + vlen > INT32_LIMIT) {
                        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of values for one Arrow batch");
                        goto fail;
                    }
                    if (copy_data) {
                        memcpy(o_vdata + vd_len, vptr, vlen);
                        vd_len += vlen;
                    }
                    o_vvalid[rows >> 3] |= (uint8_t)(1 << (rows & 7));
                } else {
                    value_nulls++;
                }
                o_voffs[rows + 1] = (int32_t)vd_len;
                if (include_headers) {
                    if (hcount > 0)
                        ((uint8_t *)lvalid.p)[rows >> 3] |= (uint8_t)(1 << (rows & 7));
                    else
                        list_nulls++;
                    ((int32_t *)loffs.p)[rows + 1] = (int32_t)hrows;
                }
                rows++;
            }
            if (p != e)
                CORRUPT("trailing bytes after the last record of the batch");
            PyBuffer_Release(&view);
            have_view = 0;
        }
        offs.len = rows * 8;
        tss.len = rows * 8;
        tst.len = rows * 4;
        kvalid.len = vvalid.len = (rows + 7) / 8;
        koffs.len = voffs.len = (rows + 1) * 4;
        kdata.len = kd_len;
        vdata.len = vd_len;
        if (include_headers) {
            lvalid.len = (rows + 7) / 8;
            loffs.len = (rows + 1) * 4;
        }
    }

    if (obuf_finish(&offs) < 0 || obuf_finish(&tss) < 0 || obuf_finish(&tst) < 0 ||
        obuf_finish(&kvalid) < 0 || obuf_finish(&koffs) < 0 || obuf_finish(&kdata) < 0 ||
        obuf_finish(&vvalid) < 0 || obuf_finish(&voffs) < 0 || obuf_finish(&vdata) < 0)
        goto fail;
    if (include_headers) {
        PyObject *headers;
        if (obuf_finish(&lvalid) < 0 || obuf_finish(&loffs) < 0 || obuf_finish(&hkoffs) < 0 ||
            obuf_finish(&hkdata) < 0 || obuf_finish(&hvvalid) < 0 || obuf_finish(&hvoffs) < 0 ||
            obuf_finish(&hvdata) < 0)
            goto fail;
        headers = Py_BuildValue("(OOnnOOOOOn)", lvalid.obj, loffs.obj, list_nulls, hrows,
                                hkoffs.obj, hkdata.obj, hvvalid.obj, hvoffs.obj, hvdata.obj,
                                hvalue_nulls);
        if (headers == NULL)
            goto fail;
        result = Py_BuildValue("(nOOOOOOnOOOnN)", rows, offs.obj, tss.obj, tst.obj, kvalid.obj,
                               koffs.obj, kdata.obj, key_nulls, vvalid.obj, voffs.obj, vdata.obj,
                               value_nulls, headers);
    } else {
        result = Py_BuildValue("(nOOOOOOnOOOnO)", rows, offs.obj, tss.obj, tst.obj, kvalid.obj,
                               koffs.obj, kdata.obj, key_nulls, vvalid.obj, voffs.obj, vdata.obj,
                               value_nulls, Py_None);
    }
    goto cleanup;

corrupt:
    raise_record_error(si, record_index, errmsg);
fail:
    result = NULL;
cleanup:
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(offs.obj);
    Py_XDECREF(tss.obj);
    Py_XDECREF(tst.obj);
    Py_XDECREF(kvalid.obj);
    Py_XDECREF(koffs.obj);
    Py_XDECREF(kdata.obj);
    Py_XDECREF(vvalid.obj);
    Py_XDECREF(voffs.obj);
    Py_XDECREF(vdata.obj);
    Py_XDECREF(lvalid.obj);
    Py_XDECREF(loffs.obj);
    Py_XDECREF(hkoffs.obj);
    Py_XDECREF(hkdata.obj);
    Py_XDECREF(hvvalid.obj);
    Py_XDECREF(hvoffs.obj);
    Py_XDECREF(hvdata.obj);
    return result;
}


/* ------------------------------------------------------------------------------------------ */
/* Encoding (the Spark sink's hot path).                                                       */

/* 16 bytes moved as one unit (an unaligned vector load/store where the target has one). */
typedef struct { uint64_t lo, hi; } bytes16;

/* Copies n key or value bytes and returns d + n. Short lengths (most keys and values) move as
 * a few fixed-size words that overlap instead of calling memcpy; no byte outside [s, s + n) is
 * read and none outside [d, d + n) written. */
static inline char *copy_bytes(char *d, const char *s, size_t n) {
    if (n <= 16) {
        if (n >= 8) {
            uint64_t a, b;
            memcpy(&a, s, 8);
            memcpy(&b, s + n - 8, 8);
            memcpy(d, &a, 8);
            memcpy(d + n - 8, &b, 8);
        } else if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, s, 4);
            memcpy(&b, s + n - 4, 4);
            memcpy(d, &a, 4);
            memcpy(d + n - 4, &b, 4);
        } else if (n > 0) {
            char a = s[0], b = s[n / 2], c = s[n - 1];
            d[0] = a;
            d[n / 2] = b;
            d[n - 1] = c;
        }
    } else if (n <= 256) {
        bytes16 v;
        for (size_t k = 0; k + 16 < n; k += 16) {
            memcpy(&v, s + k, 16);
            memcpy(d + k, &v, 16);
        }
        memcpy(&v, s + n - 16, 16);      /* the tail, overlapping the last whole word */
        memcpy(d + n - 16, &v, 16);
    } else {
        memcpy(d, s, n);
    }
    return d + n;
}

/* A binary column as Arrow lays it out: int32 offsets (n + 1, already shifted by the array's
 * offset), data bytes and an optional byte-per-row validity (nonzero = present). Offsets are
 * checked for rows [lo, hi), the rows the caller reads. */
typedef struct {
    Py_buffer offs, data, valid;
    int has_valid;
} bincol;

static int bincol_get(PyObject *offs, PyObject *data, PyObject *valid, bincol *c, Py_ssize_t n,
                      Py_ssize_t lo, Py_ssize_t hi, const char *what) {
    memset(c, 0, sizeof(*c));
    if (PyObject_GetBuffer(offs, &c->offs, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offs);
        return -1;
    }
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offs);
            PyBuffer_Release(&c->data);
            return -1;
        }
        c->has_valid = 1;
    }
    if (c->offs.len < (n + 1) * 4 || (c->has_valid && c->valid.len < n)) {
        PyErr_Format(PyExc_ValueError, "%s column buffers are shorter than %zd rows", what, n);
        return -2;
    }
    const int32_t *o = (const int32_t *)c->offs.buf;
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > c->data.len) {
            PyErr_Format(PyExc_ValueError, "%s column offsets out of range at row %zd", what, i);
            return -2;
        }
    }
    return 0;
}

static void bincol_release(bincol *c) {
    if (c->offs.obj)
        PyBuffer_Release(&c->offs);
    if (c->data.obj)
        PyBuffer_Release(&c->data);
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
}

static inline int bincol_null(const bincol *c, Py_ssize_t i) {
    return c->has_valid && ((const uint8_t *)c->valid.buf)[i] == 0;
}

/* One record without headers (key/value length -1: null); returns the end. */
static inline char *put_record(char *p, int64_t tsd, int64_t od, const char *k, int64_t kl, const char *v,
                               int64_t vl) {
    int64_t body = 1 + varlong_size(tsd) + varlong_size(od) + varlong_size(kl) + (kl > 0 ? kl : 0) +
                   varlong_size(vl) + (vl > 0 ? vl : 0) + 1;
    p = put_varlong(p, body);
    *p++ = 0; /* attributes */
    p = put_varlong(p, tsd);
    p = put_varlong(p, od);
    p = put_varlong(p, kl);
    if (kl > 0)
        p = copy_bytes(p, k, (size_t)kl);
    p = put_varlong(p, vl);
    if (vl > 0)
        p = copy_bytes(p, v, (size_t)vl);
    *p++ = 0; /* header count */
    return p;
}

/* encode_records(n, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,
 *                timestamps, base_timestamp, start, end) -> bytes
 * The records section of a RecordBatch v2 for rows [start, end): offsetDelta = row - start,
 * timestampDelta = timestamps[row] - base_timestamp, no headers. key_valid / value_valid may be
 * None (no nulls). */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    Py_ssize_t n, start, end;
    long long base_ts;
    PyObject *ko, *kd, *kv, *vo, *vd, *vv, *tso;
    if (!PyArg_ParseTuple(args, "nOOOOOOOLnn", &n, &ko, &kd, &kv, &vo, &vd, &vv, &tso, &base_ts,
                          &start, &end))
        return NULL;
    if (start < 0 || end > n || start > end) {
        PyErr_Format(PyExc_ValueError, "row range [%zd, %zd) outside 0..%zd", start, end, n);
        return NULL;
    }
    bincol key, val;
    Py_buffer ts;
    PyObject *result = NULL;
    memset(&key, 0, sizeof(key));
    memset(&val, 0, sizeof(val));
    if (bincol_get(ko, kd, kv, &key, n, start, end, "key") < 0 ||
        bincol_get(vo, vd, vv, &val, n, start, end, "value") < 0)
        goto done;
    if (PyObject_GetBuffer(tso, &ts, PyBUF_SIMPLE) < 0)
        goto done;
    if (ts.len < n * 8) {
        PyErr_Format(PyExc_ValueError, "timestamps buffer shorter than %zd rows", n);
        PyBuffer_Release(&ts);
        goto done;
    }
    const int32_t *koff = (const int32_t *)key.offs.buf, *voff = (const int32_t *)val.offs.buf;
    const int64_t *t = (const int64_t *)ts.buf;
    /* exact size first: one allocation, no growth */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t body = 1 + varlong_size(t[i] - base_ts) + uvarint_size((uint64_t)(i - start) << 1) + 1;
        if (bincol_null(&key, i))
            body += 1;
        else {
            int64_t l = koff[i + 1] - koff[i];
            body += uvarint_size((uint64_t)l << 1) + l;
        }
        if (bincol_null(&val, i))
            body += 1;
        else {
            int64_t l = voff[i + 1] - voff[i];
            body += uvarint_size((uint64_t)l << 1) + l;
        }
        if (body > INT32_LIMIT) {
            PyErr_Format(PyExc_ValueError, "record at row %zd is too large (%lld bytes)", i, (long long)body);
            PyBuffer_Release(&ts);
            goto done;
        }
        total += uvarint_size((uint64_t)body << 1) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        PyBuffer_Release(&ts);
        goto done;
    }
    char *p = PyBytes_AS_STRING(result);
    const char *kdat = (const char *)key.data.buf, *vdat = (const char *)val.data.buf;
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t kl = bincol_null(&key, i) ? -1 : koff[i + 1] - koff[i];
        int64_t vl = bincol_null(&val, i) ? -1 : voff[i + 1] - voff[i];
        p = put_record(p, t[i] - base_ts, i - start, kdat + koff[i], kl, vdat + voff[i], vl);
    }
    PyBuffer_Release(&ts);
done:
    bincol_release(&key);
    bincol_release(&val);
    return result;
}

static inline char *put_be16(char *p, int v) {
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
    return p + 2;
}

static inline char *put_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
    return p + 4;
}

static inline char *put_be64(char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    return put_be32(p + 4, (uint32_t)v);
}

#define BATCH_HEADER 61
#define SCAN_FIELDS 9       /* int64 fields per batch in scan_batches' (and encode_batch_run's) output */
#define SEQUENCE_WRAP 2147483648LL

/* encode_batch_run(n, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,
 *                  timestamps, rows, batch_bytes, max_records, partition_leader_epoch,
 *                  producer_id, producer_epoch, base_sequence[, out, out_pos[, fields_base]])
 *     -> (bytes, batch_count), or with `out`: (size, batch_count), or with `out` and
 *        fields_base >= 0: (size, batch_count, fields)
 * Uncompressed RecordBatch v2 batches (CreateTime, base offset 0, no headers) for the rows of
 * Arrow-layout binary columns, concatenated. `rows` (int64 buffer or None) lists the rows to
 * encode in order; None means 0..n-1. Batches are cut as encode.py's _chunk_bounds does: rows are
 * added while the estimated record bytes (key + value + 21 per row) stay within batch_bytes (at
 * least one row), and at most max_records (<= 0: no limit). The records of a batch are numbered
 * from 0; baseSequence (when base_sequence >= 0) is that of the batch's first row in the run.
 *
 * Two passes. The first checks every row (index, offsets, sizes), cuts the batches and keeps
 * what the second needs per row (row_plan), so nothing is written unless all of it fits and is
 * valid. The second writes each batch's header first (its fields are all known by then), then
 * its records, checksumming them a few KiB at a time while they are still in the L1 cache.
 *
 * With fields_base >= 0, `fields` is the batches' header fields as scan_batches returns them
 * (9 native int64 per batch), each batch's position being fields_base + its offset in the run:
 * what a caller would otherwise read back from the batches just written. None when the run did
 * not fit (batch_count -1). */

typedef struct {
    int64_t ts_delta;
    int32_t key_at, key_len;        /* length -1: null */
    int32_t value_at, value_len;
    int64_t body;                   /* the record's bytes after its length varint */
} row_plan;

typedef struct {
    Py_ssize_t end;                 /* one past the batch's last row (index into the run) */
    int64_t base_ts, max_ts;
} batch_plan;

/* Rows ahead whose key and value bytes are prefetched: the rows of a partition are scattered
 * over the Arrow batch, so each record's value is a likely cache miss (24 measured best, 8 was
 * ~3 ns/row slower in bench/bench_encode.py's sink-like setting). */
#define PREFETCH_ROWS 24
/* Written bytes checksummed together: whole rounds of crc32c_hw's three 256-byte lanes. */
#define CRC_ROUND 768
#define CRC_CHUNK (4 * CRC_ROUND)

/* The columns pass 1 reads. */
typedef struct {
    const int32_t *koff, *voff;
    const uint8_t *kvalid, *vvalid;     /* NULL: no nulls */
    int64_t klimit, vlimit;             /* data buffer lengths */
    const int64_t *t;
    Py_ssize_t n;
} run_columns;

/* Pass 1: checks each row of the run (rows NULL: 0..count-1), cuts the batches and sizes each
 * record exactly into plan / cuts. Returns the batch count and the run's size in *total, or -1
 * with an exception set. */
static inline __attribute__((always_inline)) Py_ssize_t plan_run(
        const run_columns *c, const int64_t *rows, Py_ssize_t count, Py_ssize_t batch_bytes,
        Py_ssize_t max_records, row_plan *plan, batch_plan *cuts, Py_ssize_t *total) {
    const int32_t *koff = c->koff, *voff = c->voff;
    const uint8_t *kvalid = c->kvalid, *vvalid = c->vvalid;
    const int64_t klimit = c->klimit, vlimit = c->vlimit, *t = c->t;
    const Py_ssize_t n = c->n;
    Py_ssize_t batches = 0, j = 0;
    *total = 0;
    while (j < count) {
        Py_ssize_t first = j;
        int64_t estimate = 0, bytes = 0, base_ts = 0, max_ts = 0;
        for (; j < count; j++) {
            int64_t i = rows ? rows[j] : j;
            if ((uint64_t)i >= (uint64_t)n) {
                PyErr_Format(PyExc_ValueError, "row index %lld at %zd outside 0..%zd", (long long)i, j, n);
                return -1;
            }
            int64_t k0 = koff[i], k1 = koff[i + 1], v0 = voff[i], v1 = voff[i + 1];
            if (k0 < 0 || k1 < k0 || k1 > klimit) {
                PyErr_Format(PyExc_ValueError, "key column offsets out of range at row %lld", (long long)i);
                return -1;
            }
            if (v0 < 0 || v1 < v0 || v1 > vlimit) {
                PyErr_Format(PyExc_ValueError, "value column offsets out of range at row %lld", (long long)i);
                return -1;
            }
            int64_t est = (k1 - k0) + (v1 - v0) + 21;
            if (j > first && (estimate + est > batch_bytes || (max_records > 0 && j - first >= max_records)))
                break;
            estimate += est;
            int64_t stamp = t[i];
            if (j == first)
                base_ts = max_ts = stamp;
            else if (stamp > max_ts)
                max_ts = stamp;
            int64_t kl = kvalid && !kvalid[i] ? -1 : k1 - k0;
            int64_t vl = vvalid && !vvalid[i] ? -1 : v1 - v0;
            int64_t tsd = (int64_t)((uint64_t)stamp - (uint64_t)base_ts);
            int64_t body = 1 + varlong_size(tsd) + uvarint_size((uint64_t)(j - first) << 1) +
                           varlong_size(kl) + (kl > 0 ? kl : 0) + varlong_size(vl) + (vl > 0 ? vl : 0) + 1;
            int64_t size = uvarint_size((uint64_t)body << 1) + body;
            if (size > INT32_LIMIT) {
                PyErr_Format(PyExc_ValueError, "record at row %lld is too large (%lld bytes)", (long long)i,
                             (long long)size);
                return -1;
            }
            plan[j] = (row_plan){tsd, (int32_t)k0, (int32_t)kl, (int32_t)v0, (int32_t)vl, body};
            bytes += size;
        }
        if (BATCH_HEADER + bytes > INT32_LIMIT) {
            PyErr_Format(PyExc_ValueError, "a batch of rows %zd..%zd is too large", first, j);
            return -1;
        }
        cuts[batches++] = (batch_plan){j, base_ts, max_ts};
        *total += BATCH_HEADER + bytes;
    }
    return batches;
}

static PyObject *encode_batch_run(PyObject *self, PyObject *args) {
    Py_ssize_t n, batch_bytes, max_records;
    int leader_epoch, producer_epoch, base_sequence;
    long long producer_id;
    PyObject *ko, *kd, *kv, *vo, *vd, *vv, *tso, *rowso, *outo = Py_None, *fields = NULL;
    Py_ssize_t out_pos = 0, fields_base = -1;
    if (!PyArg_ParseTuple(args, "nOOOOOOOOnniLii|Onn", &n, &ko, &kd, &kv, &vo, &vd, &vv, &tso, &rowso,
                          &batch_bytes, &max_records, &leader_epoch, &producer_id, &producer_epoch,
                          &base_sequence, &outo, &out_pos, &fields_base))
        return NULL;
    if (fields_base >= 0 && outo == Py_None) {
        PyErr_SetString(PyExc_ValueError, "fields_base needs an output buffer");
        return NULL;
    }
    if (batch_bytes < 1) {
        PyErr_Format(PyExc_ValueError, "batch_bytes must be >= 1, got %zd", batch_bytes);
        return NULL;
    }
    bincol key, val;
    Py_buffer ts, rowsbuf, outbuf;
    int have_ts = 0, have_rows = 0, have_out = 0;
    PyObject *result = NULL, *data = NULL;
    row_plan *plan = NULL;
    batch_plan *cuts = NULL;
    memset(&key, 0, sizeof(key));
    memset(&val, 0, sizeof(val));
    /* offsets are checked below, for the rows read only */
    if (bincol_get(ko, kd, kv, &key, n, 0, 0, "key") < 0 || bincol_get(vo, vd, vv, &val, n, 0, 0, "value") < 0)
        goto done;
    if (PyObject_GetBuffer(tso, &ts, PyBUF_SIMPLE) < 0)
        goto done;
    have_ts = 1;
    if (ts.len < n * 8) {
        PyErr_Format(PyExc_ValueError, "timestamps buffer shorter than %zd rows", n);
        goto done;
    }
    Py_ssize_t count = n;
    const int64_t *rows = NULL;
    if (rowso != Py_None) {
        if (PyObject_GetBuffer(rowso, &rowsbuf, PyBUF_SIMPLE) < 0)
            goto done;
        have_rows = 1;
        count = rowsbuf.len / 8;
        rows = (const int64_t *)rowsbuf.buf;
    }
    const int32_t *koff = (const int32_t *)key.offs.buf, *voff = (const int32_t *)val.offs.buf;
    const uint8_t *kvalid = key.has_valid ? (const uint8_t *)key.valid.buf : NULL;
    const uint8_t *vvalid = val.has_valid ? (const uint8_t *)val.valid.buf : NULL;
    const int64_t klimit = key.data.len, vlimit = val.data.len;
    const int64_t *t = (const int64_t *)ts.buf;
    const char *kdat = (const char *)key.data.buf, *vdat = (const char *)val.data.buf;
    plan = PyMem_Malloc(sizeof(row_plan) * (size_t)(count + 1));
    cuts = PyMem_Malloc(sizeof(batch_plan) * (size_t)(count + 1));
    if (plan == NULL || cuts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 1, inlined for a row list and for all rows */
    run_columns cols = {koff, voff, kvalid, vvalid, klimit, vlimit, t, n};
    Py_ssize_t total;
    Py_ssize_t batches = rows ? plan_run(&cols, rows, count, batch_bytes, max_records, plan, cuts, &total)
                              : plan_run(&cols, NULL, count, batch_bytes, max_records, plan, cuts, &total);
    if (batches < 0)
        goto done;
    char *out;
    if (outo != Py_None) {
        /* Into the caller's buffer at out_pos; when the batches do not fit, nothing is written
         * and the batch count is -1 (the caller makes room and asks again). */
        if (PyObject_GetBuffer(outo, &outbuf, PyBUF_WRITABLE) < 0)
            goto done;
        have_out = 1;
        if (out_pos < 0 || out_pos > outbuf.len) {
            PyErr_Format(PyExc_ValueError, "output position %zd outside 0..%zd", out_pos, outbuf.len);
            goto done;
        }
        if (outbuf.len - out_pos < total) {
            if (fields_base >= 0)
                result = Py_BuildValue("(nnO)", total, (Py_ssize_t)-1, Py_None);
            else
                result = Py_BuildValue("(nn)", total, (Py_ssize_t)-1);
            goto done;
        }
        out = (char *)outbuf.buf + out_pos;
        if (fields_base >= 0) {
            fields = PyBytes_FromStringAndSize(NULL, batches * SCAN_FIELDS * 8);
            if (fields == NULL)
                goto done;
        }
    } else {
        data = PyBytes_FromStringAndSize(NULL, total);
        if (data == NULL)
            goto done;
        out = PyBytes_AS_STRING(data);
    }
    /* pass 2: per batch, the header, then the records (the GIL is not needed: buffers are held) */
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t from = 0;
    char *p = out;
    for (Py_ssize_t b = 0; b < batches; b++) {
        char *head = p;
        Py_ssize_t to = cuts[b].end;
        int32_t records = (int32_t)(to - from);
        int32_t seq = base_sequence < 0 ? -1 : (int32_t)(((int64_t)base_sequence + from) % SEQUENCE_WRAP);
        char *h = head + 21;                                  /* the checksummed part */
        h = put_be16(h, 0);                                   /* attributes: none, CreateTime */
        h = put_be32(h, (uint32_t)(records - 1));             /* lastOffsetDelta */
        h = put_be64(h, (uint64_t)cuts[b].base_ts);
        h = put_be64(h, (uint64_t)cuts[b].max_ts);
        h = put_be64(h, (uint64_t)producer_id);
        h = put_be16(h, producer_epoch);
        h = put_be32(h, (uint32_t)seq);
        p = put_be32(h, (uint32_t)records);
        uint32_t crc = CRC32C_START;
        const char *unsummed = head + 21;
        for (Py_ssize_t jj = from; jj < to; jj++) {
            if (jj + PREFETCH_ROWS < count) {
                const row_plan *ahead = &plan[jj + PREFETCH_ROWS];
                __builtin_prefetch(vdat + ahead->value_at);
                __builtin_prefetch(vdat + ahead->value_at + 64);
                __builtin_prefetch(kdat + ahead->key_at);
            }
            const row_plan *r = &plan[jj];
            p = put_uvarint(p, (uint64_t)r->body << 1);
            *p++ = 0;                                         /* attributes */
            p = put_varlong(p, r->ts_delta);
            p = put_uvarint(p, (uint64_t)(jj - from) << 1);   /* offsetDelta */
            p = put_varlong(p, r->key_len);
            if (r->key_len > 0)
                p = copy_bytes(p, kdat + r->key_at, (size_t)r->key_len);
            p = put_varlong(p, r->value_len);
            if (r->value_len > 0)
                p = copy_bytes(p, vdat + r->value_at, (size_t)r->value_len);
            *p++ = 0;                                         /* header count */
            if (p - unsummed >= CRC_CHUNK) {
                Py_ssize_t len = (p - unsummed) / CRC_ROUND * CRC_ROUND;
                crc = crc32c_extend(crc, (const uint8_t *)unsummed, len);
                unsummed += len;
            }
        }
        crc = crc32c_extend(crc, (const uint8_t *)unsummed, p - unsummed);
        h = put_be64(head, 0);                                /* baseOffset */
        h = put_be32(h, (uint32_t)(p - head - 12));           /* batchLength */
        h = put_be32(h, (uint32_t)leader_epoch);              /* partitionLeaderEpoch */
        *h++ = 2;                                             /* magic */
        put_be32(h, ~crc);
        if (fields != NULL) {
            int64_t *f = (int64_t *)PyBytes_AS_STRING(fields) + b * SCAN_FIELDS;
            f[0] = fields_base + (head - out);
            f[1] = p - head;
            f[2] = 0;                                         /* baseOffset */
            f[3] = records - 1;                               /* lastOffsetDelta */
            f[4] = cuts[b].max_ts;
            f[5] = producer_id;
            f[6] = 0;                                         /* attributes */
            f[7] = cuts[b].base_ts;
            f[8] = records;
        }
        from = to;
    }
    Py_END_ALLOW_THREADS
    if (fields != NULL)
        result = Py_BuildValue("(nnO)", total, batches, fields);
    else if (have_out)
        result = Py_BuildValue("(nn)", total, batches);
    else
        result = Py_BuildValue("(On)", data, batches);
done:
    Py_XDECREF(data);
    Py_XDECREF(fields);
    PyMem_Free(plan);
    PyMem_Free(cuts);
    if (have_out)
        PyBuffer_Release(&outbuf);
    if (have_rows)
        PyBuffer_Release(&rowsbuf);
    if (have_ts)
        PyBuffer_Release(&ts);
    bincol_release(&key);
    bincol_release(&val);
    return result;
}

/* Kafka's murmur2 (Utils.murmur2, seed 0x9747b28c) as an unsigned 32-bit value. */
static uint32_t murmur2(const uint8_t *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t full = length - (length & 3);
    for (Py_ssize_t i = 0; i < full; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) | ((uint32_t)data[i + 2] << 16) |
                     ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[full + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[full + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[full];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* murmur2_partitions(n, offsets, data, valid, partitions) -> bytes of n native int32:
 * (murmur2(key) & 0x7fffffff) % partitions, or -1 for a null key. */
static PyObject *murmur2_partitions(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    long parts;
    PyObject *o, *d, *v;
    if (!PyArg_ParseTuple(args, "nOOOl", &n, &o, &d, &v, &parts))
        return NULL;
    if (parts < 1) {
        PyErr_SetString(PyExc_ValueError, "partitions must be >= 1");
        return NULL;
    }
    bincol key;
    memset(&key, 0, sizeof(key));
    if (bincol_get(o, d, v, &key, n, 0, n, "key") < 0) {
        bincol_release(&key);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, n * 4);
    if (result != NULL) {
        int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
        const int32_t *off = (const int32_t *)key.offs.buf;
        const uint8_t *dat = (const uint8_t *)key.data.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (bincol_null(&key, i))
                out[i] = -1;
            else
                out[i] = (int32_t)((murmur2(dat + off[i], off[i + 1] - off[i]) & 0x7fffffffu) % (uint32_t)parts);
        }
    }
    bincol_release(&key);
    return result;
}

/* murmur2(data) -> int: Kafka's murmur2 of one key, signed as Java's Utils.murmur2 returns it. */
static PyObject *murmur2_one(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2((const uint8_t *)b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromLong((long)(int32_t)h);
}

/* group_rows(parts, count) -> (order, starts): the row numbers 0..n-1 grouped by their partition
 * (parts: int32 buffer, each in 0..count-1), keeping input order within a partition (a stable
 * counting sort: two passes, where numpy needs a pass per partition or a sort). order is
 * int64[n]; partition p's rows are order[starts[p]:starts[p + 1]], starts being int64[count + 1]. */
static PyObject *group_rows(PyObject *self, PyObject *args) {
    Py_buffer pb;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &pb, &count))
        return NULL;
    PyObject *order = NULL, *starts = NULL, *result = NULL;
    const int32_t *parts = (const int32_t *)pb.buf;
    Py_ssize_t n = pb.len / 4;
    if (count < 1) {
        PyErr_Format(PyExc_ValueError, "partition count must be >= 1, got %zd", count);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parts[i] < 0 || parts[i] >= count) {
            PyErr_Format(PyExc_ValueError, "row %zd has partition %d, outside 0..%zd", i, parts[i], count - 1);
            goto done;
        }
    }
    order = PyBytes_FromStringAndSize(NULL, n * 8);
    starts = PyBytes_FromStringAndSize(NULL, (count + 1) * 8);
    if (order == NULL || starts == NULL)
        goto done;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(order), *st = (int64_t *)PyBytes_AS_STRING(starts);
    memset(st, 0, (size_t)(count + 1) * 8);
    for (Py_ssize_t i = 0; i < n; i++)
        st[parts[i] + 1]++;
    for (Py_ssize_t p = 0; p < count; p++)
        st[p + 1] += st[p];
    /* st[p] is now where partition p's next row goes; afterwards it is partition p + 1's start,
     * so the loop below shifts the counts back by one partition as it places the rows. */
    for (Py_ssize_t i = 0; i < n; i++)
        o[st[parts[i]]++] = i;
    memmove(st + 1, st, (size_t)count * 8);
    st[0] = 0;
    result = Py_BuildValue("(OO)", order, starts);
done:
    Py_XDECREF(order);
    Py_XDECREF(starts);
    PyBuffer_Release(&pb);
    return result;
}

/* ------------------------------------------------------------------------------ batch scanning
 * scan_batches() walks the RecordBatch v2 headers of a buffer of whole batches (a staged file the
 * log adopts as a segment), checks each as logcore.records.batch._scan does (length, magic, CRC)
 * and returns their fields as one int64 array, without holding the GIL while it runs. */

#define BATCH_HEADER_SIZE 61
#define BATCH_MIN_LENGTH 49 /* batchLength of a header with no record: 61 - 12 */

static PyObject *scan_batches(PyObject *self, PyObject *args) {
    Py_buffer view;
    int verify_crc, allow_partial_tail = 0;
    if (!PyArg_ParseTuple(args, "y*p|p", &view, &verify_crc, &allow_partial_tail))
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t end = view.len;
    /* First pass counts batches so the output is allocated once. */
    Py_ssize_t n = 0, pos = 0, bad_pos = -1;
    const char *error = NULL;
    char message[160];
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        Py_ssize_t remaining = end - pos;
        if (remaining < 17) {
            if (allow_partial_tail)
                break;
            error = "partial batch: fewer bytes left than a batch header needs";
            bad_pos = pos;
            break;
        }
        int32_t length = be32(buf + pos + 8);
        if (length < BATCH_MIN_LENGTH) {
            error = "batch length is smaller than the minimum";
            bad_pos = pos;
            break;
        }
        Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > remaining) {
            if (allow_partial_tail)
                break;
            error = "partial batch: it declares more bytes than remain";
            bad_pos = pos;
            break;
        }
        if (buf[pos + 16] != 2) {
            error = buf[pos + 16] < 2 ? "legacy message format (magic 0 or 1) is not supported; seglog reads RecordBatch v2 (magic 2) only"
                                      : "unknown record batch magic";
            bad_pos = pos;
            break;
        }
        if (size < BATCH_HEADER_SIZE) {
            error = "batch size is smaller than the 61-byte header";
            bad_pos = pos;
            break;
        }
        if (verify_crc) {
            uint32_t stored = (uint32_t)be32(buf + pos + 17);
            if (stored != crc32c_of(buf + pos + 21, size - 21)) {
                error = "CRC mismatch";
                bad_pos = pos;
                break;
            }
        }
        n++;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    if (error != NULL) {
        snprintf(message, sizeof message, "%s", error);
        raise_record_error(-1, (long long)bad_pos, message);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * SCAN_FIELDS * 8);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *f = (int64_t *)PyByteArray_AS_STRING(out);
    pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *h = buf + pos;
        Py_ssize_t size = (Py_ssize_t)be32(h + 8) + 12;
        f[0] = pos;
        f[1] = size;
        f[2] = be64(h);                  /* baseOffset */
        f[3] = be32(h + 23);             /* lastOffsetDelta */
        f[4] = be64(h + 35);             /* maxTimestamp */
        f[5] = be64(h + 43);             /* producerId */
        f[6] = be16(h + 21);             /* attributes */
        f[7] = be64(h + 27);             /* baseTimestamp */
        f[8] = be32(h + 57);             /* recordsCount */
        f += SCAN_FIELDS;
        pos += size;
    }
    PyBuffer_Release(&view);
    return out;
}


/* The record-level checks of `count` records filling [p, e) exactly (a produced batch's records
 * section, or a compressed one's inflated records), as decode_sections validates them: returns
 * (first record whose offset delta is not its index or -1, that delta, first record with a null
 * key or -1, smallest and largest record timestamp in ms), or NULL with RecordError(0, record,
 * message) set. */
static PyObject *check_record_run(const uint8_t *p, const uint8_t *e, int32_t count, int64_t base_ts,
                                  int64_t max_ts, int log_append) {
    const char *errmsg = NULL;
    long long record_index = 0;
    long long bad_delta = -1, first_null_key = -1;
    int32_t bad_delta_value = 0;
    int64_t min_seen = INT64_MAX, max_seen = INT64_MIN;
    if (count < 0)
        CORRUPT("negative record count");
    for (long long r = 0; r < count; r++) {
        record_view rv;
        int64_t ts;
        record_index = r;
        if ((errmsg = parse_record(&p, e, &rv)) != NULL)
            goto corrupt;
        if (rv.offset_delta != r && bad_delta < 0) {
            bad_delta = r;
            bad_delta_value = rv.offset_delta;
        }
        if (rv.klen < 0 && first_null_key < 0)
            first_null_key = r;
        ts = log_append ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)rv.ts_delta);
        if (ts < min_seen)
            min_seen = ts;
        if (ts > max_seen)
            max_seen = ts;
    }
    if (p != e)
        CORRUPT("trailing bytes after the last record of the batch");
    return Py_BuildValue("(LiLLL)", bad_delta, (int)bad_delta_value, first_null_key,
                         (long long)min_seen, (long long)max_seen);
corrupt:
    raise_record_error(0, record_index, errmsg);
    return NULL;
}

/* check_produced_batch: the record-level checks of one produced, uncompressed batch (the
 * broker's produce path), in one call and without building columns. Magic and CRC as
 * scan_batches (RecordError(-1, 0, message)); every record as decode_sections validates it
 * (RecordError(0, record, message)). Returns check_record_run's tuple, or None for a compressed
 * batch (the caller inflates it and calls check_inflated_records). The caller has checked that
 * the buffer holds exactly the batch its header declares. */
static PyObject *check_produced_batch(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t size = view.len;
    if (size < BATCH_HEADER_SIZE || (Py_ssize_t)be32(buf + 8) + 12 != size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "check_produced_batch takes exactly one whole batch");
        return NULL;
    }
    if (buf[16] != 2) {
        raise_record_error(-1, 0,
                           buf[16] < 2 ? "legacy message format (magic 0 or 1) is not supported; seglog reads RecordBatch v2 (magic 2) only"
                                       : "unknown record batch magic");
        PyBuffer_Release(&view);
        return NULL;
    }
    int crc_ok;
    Py_BEGIN_ALLOW_THREADS
    crc_ok = (uint32_t)be32(buf + 17) == crc32c_of(buf + 21, size - 21);
    Py_END_ALLOW_THREADS
    if (!crc_ok) {
        raise_record_error(-1, 0, "CRC mismatch");
        PyBuffer_Release(&view);
        return NULL;
    }
    int16_t attributes = be16(buf + 21);
    if (attributes & 0x7) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    result = check_record_run(buf + BATCH_HEADER_SIZE, buf + size, (int32_t)be32(buf + 57),
                              be64(buf + 27), be64(buf + 35), (attributes & 0x8) != 0);
    PyBuffer_Release(&view);
    return result;
}

/* check_inflated_records(buffer, count, base_timestamp, max_timestamp, log_append_time): the
 * checks of check_produced_batch on a compressed batch's records once inflated (its header
 * and CRC checked by the caller, which passes the header's fields). */
static PyObject *check_inflated_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    int count, log_append;
    long long base_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*iLLp", &view, &count, &base_ts, &max_ts, &log_append))
        return NULL;
    const uint8_t *buf = view.buf;
    PyObject *result = check_record_run(buf, buf + view.len, count, base_ts, max_ts, log_append);
    PyBuffer_Release(&view);
    return result;
}

/* build() for Python: a decoded request's envelope is made as its body is (wirereader.h). */
static PyObject *new_instance(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2]) ||
        PyTuple_GET_SIZE(args[1]) != PyTuple_GET_SIZE(args[2]) || PyTuple_GET_SIZE(args[1]) > 16) {
        PyErr_SetString(PyExc_TypeError, "new_instance(cls, names, values): two tuples of one length (at most 16)");
        return NULL;
    }
    PyObject *values[16];
    int n = (int)PyTuple_GET_SIZE(args[2]);
    for (int i = 0; i < n; i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(args[1], i))) {
            PyErr_SetString(PyExc_TypeError, "new_instance: field names must be str");
            return NULL;
        }
    for (int i = 0; i < n; i++)
        values[i] = Py_NewRef(PyTuple_GET_ITEM(args[2], i));
    return build(args[0], &PyTuple_GET_ITEM(args[1], 0), values, n);
}

static PyMethodDef methods[] = {
    {"new_instance", (PyCFunction)(void (*)(void))new_instance, METH_FASTCALL,
     "new_instance(cls, names, values) -> an instance of the class `cls` with the fields `names` set\n"
     "to `values` (tuples of one length) as object.__setattr__ sets them, without its __init__."},
    {"check_produced_batch", check_produced_batch, METH_VARARGS,
     "check_produced_batch(buffer) -> (bad_delta_index, bad_delta, first_null_key, min_timestamp,\n"
     "max_timestamp) or None when compressed: magic, CRC and every record of exactly one batch\n"
     "validated; RecordError(-1, 0, message) for the batch, (0, record, message) for a record."},
    {"check_inflated_records", check_inflated_records, METH_VARARGS,
     "check_inflated_records(buffer, count, base_timestamp, max_timestamp, log_append_time) ->\n"
     "check_produced_batch's tuple for the inflated records section of a compressed batch;\n"
     "RecordError(0, record, message) for a record."},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(n, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,\n"
     "timestamps, base_timestamp, start, end) -> bytes: the records section (no headers) of rows\n"
     "[start, end) of Arrow-layout binary columns."},
    {"encode_batch_run", encode_batch_run, METH_VARARGS,
     "encode_batch_run(n, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,\n"
     "timestamps, rows, batch_bytes, max_records, partition_leader_epoch, producer_id,\n"
     "producer_epoch, base_sequence[, out, out_pos[, fields_base]]) -> (bytes, batch_count):\n"
     "uncompressed batches without headers for the rows (all, or those listed in the int64 buffer\n"
     "`rows`), concatenated. With a writable buffer `out`: written at out_pos, returns\n"
     "(size, batch_count), or (size, -1) and writes nothing when size bytes do not fit there.\n"
     "With fields_base >= 0 also the batches' scan_batches fields (positions from fields_base):\n"
     "(size, batch_count, fields bytes or None)."},
    {"group_rows", group_rows, METH_VARARGS,
     "group_rows(parts, count) -> (order, starts): bytes of int64 row numbers grouped by partition\n"
     "(stable) and bytes of int64[count + 1] where each partition's rows start."},
    {"murmur2", murmur2_one, METH_O,
     "murmur2(data) -> int: Kafka's murmur2 of one key (Utils.murmur2), a signed 32-bit int."},
    {"murmur2_partitions", murmur2_partitions, METH_VARARGS,
     "murmur2_partitions(n, offsets, data, valid, partitions) -> bytes of int32: Kafka's default\n"
     "partitioner for each key of an Arrow-layout binary column, -1 for null keys."},
    {"decode_sections", decode_sections, METH_VARARGS,
     "decode_sections(sections, min_offset, max_offset, include_headers, allocate=None,\n"
     "copy_data=True) -> tuple"
     "of Arrow buffers. sections: list of (buffer, start, end, base_offset, base_timestamp,\n"
     "max_timestamp, timestamp_type, records_count[, crc_from]) for the decompressed record section\n"
     "of each batch. With crc_from, the batch's CRC (the 4 bytes before buffer[crc_from]) is checked\n"
     "over buffer[crc_from:end] first (RecordError with record -1 on mismatch); a section with\n"
     "start == end and no record only checks the CRC. allocate(n), when given, returns a new fixed-size writable buffer of n bytes for each\n"
     "column buffer of bounded size (those come back as memoryviews of the bytes used).\n"
     "copy_data=False validates every record but leaves the key and value data out (empty data\n"
     "buffers, zero offsets): for callers that need offsets, timestamps and null counts only."},
    {"decode_produce_request", (PyCFunction)(void (*)(void))decode_produce_request, METH_FASTCALL,
     "decode_produce_request(frame, version, body_cls, topic_cls, partition_cls) -> (correlation_id,\n"
     "client_id, body): a Produce v3..v10 request frame (size prefix removed) into instances of the\n"
     "three slotted classes, made without their __init__; each partition's records a view of the\n"
     "frame. ValueError naming the byte position for a malformed frame."},
    {"decode_fetch_request", (PyCFunction)(void (*)(void))decode_fetch_request, METH_FASTCALL,
     "decode_fetch_request(frame, version, classes) -> (correlation_id, client_id, body): a Fetch\n"
     "v4..v16 request frame (size prefix removed) into kio's dataclasses of that version, made\n"
     "without their __init__; classes: (request, topic, partition, forgotten topic, replica state,\n"
     "uuid.UUID, uuid.SafeUUID.unknown). ValueError naming the byte position for a malformed frame."},
    {"encode_fetch_response", (PyCFunction)(void (*)(void))encode_fetch_response, METH_FASTCALL,
     "encode_fetch_response(correlation_id, version, body, file_slice_cls, inline_max) -> list of\n"
     "pieces: the whole Fetch v4..v16 response frame (size prefix included) for the handler's dict\n"
     "(Kafka field names), as bytes and each partition's records object that is a file_slice_cls\n"
     "or bytes longer than inline_max, in order."},
    {"encode_produce_results", (PyCFunction)(void (*)(void))encode_produce_results, METH_FASTCALL,
     "encode_produce_results(correlation_id, version, topics, throttle_time) -> bytes: the whole\n"
     "Produce v3..v10 response frame (size prefix included); topics as (name, partitions), each\n"
     "partition (index, error_code, base_offset, log_append_time, log_start_offset, error_message\n"
     "[, record_errors as (batch_index, message) pairs])."},
    {"scan_batches", scan_batches, METH_VARARGS,
     "scan_batches(buffer, verify_crc, allow_partial_tail=False) -> bytearray of int64 rows\n"
     "(position, size, baseOffset, lastOffsetDelta, maxTimestamp, producerId, attributes,\n"
     "baseTimestamp, recordsCount), one per batch; raises RecordError(-1, position, message) at\n"
     "the first bad one (a partial last batch ends the scan quietly when allow_partial_tail)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_fastcodec",
                                       "RecordBatch v2 record scanning into Arrow buffers.", -1,
                                       methods};

PyMODINIT_FUNC PyInit__fastcodec(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    RecordError = PyErr_NewException("logcore.records._fastcodec.RecordError", PyExc_ValueError, NULL);
    if (RecordError == NULL || PyModule_AddObject(m, "RecordError", RecordError) < 0) {
        Py_XDECREF(RecordError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(RecordError);
    if (producewire_init() < 0 || fetchwire_init() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    crc32c_init();
    return m;
}

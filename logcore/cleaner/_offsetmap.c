/*
 * _offsetmap: the log cleaner's per-record work in C.
 *
 * The offset map is an open-addressing table in one caller-owned buffer of `slots` 24-byte
 * entries: a 128-bit hash of the key (two uint64) and the int64 offset of the key's latest
 * record. A slot whose hash is all zero is empty (a key hashing to zero is stored as 1). Two
 * keys with the same 128-bit hash are treated as one key, as Kafka treats MD5 collisions.
 * Probing: a few double-hashing probes, then linear probing, so that every slot is reachable.
 *
 * put_keys / get_keys work on Arrow binary columns (int32 offsets + data + optional per-row
 * validity). filter_records walks the records of one (decompressed) batch section, decides with
 * the map which records the cleaner keeps, and writes the kept records, re-encoding the timestamp
 * delta when the batch's base timestamp changes (the delete horizon). Records are read by the
 * record codec's own parser (records/record.h, every field checked as Kafka reads it). Nothing is
 * read outside the given buffers; corrupt records raise RecordError(record_index, message).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/bigendian.h"
#include "../records/crc32c.h"
#include "../records/record.h"
#include "../records/varint.h"

static PyObject *RecordError;

#define DOUBLE_HASH_PROBES 8

typedef struct {
    uint64_t h1, h2;
    int64_t offset;
} slot_t;

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* MurmurHash3 x64 128-bit finalisation structure (seed 0). */
static void hash128(const uint8_t *data, size_t len, uint64_t *o1, uint64_t *o2) {
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = 0, h2 = 0, k1, k2;
    size_t nblocks = len / 16, i;
    for (i = 0; i < nblocks; i++) {
        k1 = load64(data + i * 16);
        k2 = load64(data + i * 16 + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + nblocks * 16;
    size_t rest = len & 15;
    k1 = 0;
    k2 = 0;
    for (i = rest; i > 8; i--)
        k2 |= ((uint64_t)tail[i - 1]) << ((i - 9) * 8);
    if (rest > 8) {
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
    }
    for (i = (rest < 8 ? rest : 8); i > 0; i--)
        k1 |= ((uint64_t)tail[i - 1]) << ((i - 1) * 8);
    if (rest > 0) {
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= len; h2 ^= len;
    h1 += h2; h2 += h1;
    h1 = fmix64(h1); h2 = fmix64(h2);
    h1 += h2; h2 += h1;
    if (h1 == 0 && h2 == 0)
        h1 = 1;
    *o1 = h1;
    *o2 = h2;
}

/* The slot holding this hash, or the empty slot where it belongs; NULL when the table is full
 * and the hash is absent. */
static slot_t *find_slot(slot_t *table, uint64_t slots, uint64_t h1, uint64_t h2) {
    uint64_t pos = h1 % slots, step = (h2 % slots) | 1, i;
    for (i = 0; i < DOUBLE_HASH_PROBES; i++) {
        slot_t *s = &table[pos];
        if ((s->h1 == h1 && s->h2 == h2) || (s->h1 == 0 && s->h2 == 0))
            return s;
        pos = (pos + step) % slots;
    }
    for (i = 0; i < slots; i++) {
        slot_t *s = &table[pos];
        if ((s->h1 == h1 && s->h2 == h2) || (s->h1 == 0 && s->h2 == 0))
            return s;
        pos = pos + 1 == slots ? 0 : pos + 1;
    }
    return NULL;
}

static int get_table(PyObject *obj, Py_buffer *view, uint64_t slots) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (slots == 0 || (uint64_t)view->len < slots * sizeof(slot_t)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "offset map table is smaller than slots * 24 bytes");
        return -1;
    }
    return 0;
}

typedef struct {
    Py_buffer offsets, data, valid, values;
    int has_valid, has_values;
} columns_t;

static void release_columns(columns_t *c) {
    PyBuffer_Release(&c->offsets);
    PyBuffer_Release(&c->data);
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
    if (c->has_values)
        PyBuffer_Release(&c->values);
}

static int get_columns(Py_ssize_t n, PyObject *offsets, PyObject *data, PyObject *valid,
                       PyObject *values, int values_writable, columns_t *c) {
    memset(c, 0, sizeof(*c));
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&c->offsets);
        return -1;
    }
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &c->valid, PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        c->has_valid = 1;
    }
    if (PyObject_GetBuffer(values, &c->values, values_writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                                               : PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    c->has_values = 1;
    if (c->offsets.len < (Py_ssize_t)((n + 1) * 4) || c->values.len < (Py_ssize_t)(n * 8) ||
        (c->has_valid && c->valid.len < n)) {
        PyErr_SetString(PyExc_ValueError, "key column buffers are shorter than the row count");
        goto fail;
    }
    const int32_t *ko = (const int32_t *)c->offsets.buf;
    if (n > 0 && (ko[0] < 0 || ko[n] > c->data.len || ko[n] < ko[0])) {
        PyErr_SetString(PyExc_ValueError, "key offsets point outside the key data");
        goto fail;
    }
    return 0;
fail:
    release_columns(c);
    return -1;
}

/* put_keys(table, slots, size, max_entries, n, key_offsets, key_data, key_valid, offsets)
 *   -> (rows_consumed, size). Rows are put in order (a later offset for a key replaces the
 *   earlier one); null keys are skipped. Stops before the first row whose key is new while the
 *   map holds max_entries keys. */
static PyObject *put_keys(PyObject *self, PyObject *args) {
    PyObject *table_obj, *ko_obj, *kd_obj, *kv_obj, *off_obj;
    unsigned long long slots, size, max_entries;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OKKKnOOOO", &table_obj, &slots, &size, &max_entries, &n, &ko_obj,
                          &kd_obj, &kv_obj, &off_obj))
        return NULL;
    Py_buffer tv;
    columns_t c;
    if (get_table(table_obj, &tv, slots) < 0)
        return NULL;
    if (get_columns(n, ko_obj, kd_obj, kv_obj, off_obj, 0, &c) < 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    slot_t *table = (slot_t *)tv.buf;
    const int32_t *ko = (const int32_t *)c.offsets.buf;
    const uint8_t *kd = (const uint8_t *)c.data.buf;
    const uint8_t *kv = c.has_valid ? (const uint8_t *)c.valid.buf : NULL;
    const int64_t *offs = (const int64_t *)c.values.buf;
    Py_ssize_t i;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++) {
        if (kv && !kv[i])
            continue;
        uint64_t h1, h2;
        hash128(kd + ko[i], (size_t)(ko[i + 1] - ko[i]), &h1, &h2);
        slot_t *s = find_slot(table, slots, h1, h2);
        int is_new = s == NULL || (s->h1 == 0 && s->h2 == 0);
        if (is_new && (size >= max_entries || s == NULL))
            break;
        if (is_new) {
            s->h1 = h1;
            s->h2 = h2;
            size++;
        }
        s->offset = offs[i];
    }
    Py_END_ALLOW_THREADS
    release_columns(&c);
    PyBuffer_Release(&tv);
    return Py_BuildValue("nK", i, size);
}

/* get_keys(table, slots, n, key_offsets, key_data, key_valid, out) fills out[i] with the offset
 * mapped to key i, or -1 (absent or null key). */
static PyObject *get_keys(PyObject *self, PyObject *args) {
    PyObject *table_obj, *ko_obj, *kd_obj, *kv_obj, *out_obj;
    unsigned long long slots;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OKnOOOO", &table_obj, &slots, &n, &ko_obj, &kd_obj, &kv_obj, &out_obj))
        return NULL;
    Py_buffer tv;
    columns_t c;
    if (get_table(table_obj, &tv, slots) < 0)
        return NULL;
    if (get_columns(n, ko_obj, kd_obj, kv_obj, out_obj, 1, &c) < 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    slot_t *table = (slot_t *)tv.buf;
    const int32_t *ko = (const int32_t *)c.offsets.buf;
    const uint8_t *kd = (const uint8_t *)c.data.buf;
    const uint8_t *kv = c.has_valid ? (const uint8_t *)c.valid.buf : NULL;
    int64_t *out = (int64_t *)c.values.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = -1;
        if (kv && !kv[i])
            continue;
        uint64_t h1, h2;
        hash128(kd + ko[i], (size_t)(ko[i + 1] - ko[i]), &h1, &h2);
        slot_t *s = find_slot(table, slots, h1, h2);
        if (s != NULL && !(s->h1 == 0 && s->h2 == 0))
            out[i] = s->offset;
    }
    Py_END_ALLOW_THREADS
    release_columns(&c);
    PyBuffer_Release(&tv);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ record filtering */

/* One record of a batch section as the filter saw it. */
typedef struct {
    Py_ssize_t start, ts_pos, after_ts, end;
    int64_t delta;
    uint8_t keep;
} rec_t;

typedef struct {
    Py_ssize_t kept, kept_bytes, tombstones_removed, tombstones_kept;
    int64_t max_ts;
    Py_ssize_t bad;          /* index of the bad record, or -1 */
    const char *error;
} decision_t;

/* Kafka's keep rule for each record of one (decompressed) section: offset > latest_offset, or a
 * key whose mapped offset is <= offset (absent keys are kept); keyless records at or below
 * latest_offset go; a kept tombstone goes when drop_tombstones. Fills recs[0..count). */
static void decide_records(const uint8_t *data, Py_ssize_t len, Py_ssize_t count, const slot_t *table,
                           uint64_t slots, int64_t base_offset, int64_t latest_offset, int drop_tombstones,
                           int64_t old_base_ts, rec_t *recs, decision_t *d) {
    const uint8_t *p = data, *end = data + len;
    memset(d, 0, sizeof(*d));
    d->bad = -1;
    d->max_ts = INT64_MIN;
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *rec_start = p;
        record_view rv;
        const char *error = parse_record(&p, end, &rv);
        if (error) { d->error = error; d->bad = i; return; }
        int64_t offset = base_offset + rv.offset_delta;
        int k = 1;
        if (offset <= latest_offset) {
            if (rv.klen < 0) {
                k = 0;
            } else {
                uint64_t h1, h2;
                hash128(rv.key, (size_t)rv.klen, &h1, &h2);
                slot_t *s = find_slot((slot_t *)table, slots, h1, h2);
                if (s != NULL && !(s->h1 == 0 && s->h2 == 0) && s->offset > offset)
                    k = 0;
            }
            if (k && rv.vlen < 0 && drop_tombstones)
                k = 0;
        }
        if (rv.vlen < 0) {
            if (k) d->tombstones_kept++; else d->tombstones_removed++;
        }
        rec_t *rc = &recs[i];
        rc->keep = (uint8_t)k;
        rc->start = rec_start - data;
        rc->ts_pos = (rv.attributes + 1) - data;
        rc->after_ts = rv.after_ts - data;
        rc->end = p - data;
        rc->delta = rv.ts_delta;
        if (k) {
            d->kept++;
            d->kept_bytes += p - rec_start;
            if (old_base_ts + rv.ts_delta > d->max_ts)
                d->max_ts = old_base_ts + rv.ts_delta;
        }
    }
    if (p != end) {
        d->error = "trailing bytes after the last record";
        d->bad = count;
    }
}

/* Write the kept records to `o`, timestamp deltas shifted by `shift` (re-encoded when non-zero;
 * a re-encoded record grows by at most 15 bytes). Returns the bytes written. */
static Py_ssize_t write_kept(const uint8_t *data, Py_ssize_t count, const rec_t *recs, int64_t shift, uint8_t *o) {
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const rec_t *rc = &recs[i];
        if (!rc->keep)
            continue;
        if (!shift) {
            memcpy(o + w, data + rc->start, rc->end - rc->start);
            w += rc->end - rc->start;
            continue;
        }
        char ts_buf[10], len_buf[10];
        int ts_n = (int)(put_varlong(ts_buf, rc->delta + shift) - ts_buf);
        int64_t body_len = 1 + ts_n + (rc->end - rc->after_ts);
        int len_n = (int)(put_varlong(len_buf, body_len) - len_buf);
        memcpy(o + w, len_buf, len_n); w += len_n;
        o[w++] = data[rc->ts_pos - 1]; /* attributes */
        memcpy(o + w, ts_buf, ts_n); w += ts_n;
        memcpy(o + w, data + rc->after_ts, rc->end - rc->after_ts); w += rc->end - rc->after_ts;
    }
    return w;
}

/* filter_records(section, count, table, slots, base_offset, latest_offset, drop_tombstones,
 *                old_base_ts, horizon_if_tombstones, has_horizon)
 *   -> (kept_bytes, kept, max_timestamp, tombstones_removed, horizon_set)
 *
 * The keep rule of decide_records on one section. When horizon_if_tombstones is not INT64_MIN
 * and the batch has no horizon yet and a tombstone is kept, the kept records' timestamp deltas
 * are re-encoded against that horizon (the new base timestamp) and horizon_set is 1. */
static PyObject *filter_records(PyObject *self, PyObject *args) {
    Py_buffer sv, tv;
    PyObject *table_obj;
    Py_ssize_t count;
    unsigned long long slots;
    long long base_offset, latest_offset, old_base_ts, horizon;
    int drop_tombstones, has_horizon;
    if (!PyArg_ParseTuple(args, "y*nOKLLpLLp", &sv, &count, &table_obj, &slots, &base_offset,
                          &latest_offset, &drop_tombstones, &old_base_ts, &horizon, &has_horizon))
        return NULL;
    if (get_table(table_obj, &tv, slots) < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)sv.buf;
    if (count < 0 || count > sv.len) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&tv);
        PyErr_SetString(PyExc_ValueError, "record count does not fit the section");
        return NULL;
    }
    rec_t *recs = PyMem_Malloc(sizeof(rec_t) * (count ? count : 1));
    if (!recs) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&tv);
        return PyErr_NoMemory();
    }
    decision_t d;
    decide_records(data, sv.len, count, (const slot_t *)tv.buf, slots, base_offset, latest_offset,
                   drop_tombstones, old_base_ts, recs, &d);
    PyObject *result = NULL;
    if (d.bad >= 0) {
        PyObject *err = Py_BuildValue("ns", d.bad, d.error);
        PyErr_SetObject(RecordError, err);
        Py_XDECREF(err);
        goto done;
    }
    int set_horizon = horizon != INT64_MIN && !has_horizon && d.tombstones_kept > 0;
    int64_t shift = set_horizon ? (int64_t)old_base_ts - (int64_t)horizon : 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, d.kept_bytes + (shift ? d.kept * 16 : 0));
    if (out == NULL)
        goto done;
    Py_ssize_t w = write_kept(data, count, recs, shift, (uint8_t *)PyBytes_AS_STRING(out));
    if (_PyBytes_Resize(&out, w) < 0)
        goto done;
    result = Py_BuildValue("NnLni", out, d.kept, (long long)d.max_ts, d.tombstones_removed, set_horizon);
done:
    PyMem_Free(recs);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&tv);
    return result;
}

/* ------------------------------------------------------------------ whole chunks of batches
 * map_batches and clean_batches take a buffer of whole batches and the rows of
 * logcore.records.batch.batch_fields (int64: position, size, baseOffset, lastOffsetDelta,
 * maxTimestamp, producerId, attributes, baseTimestamp, recordsCount) and do one call's work
 * for many batches: the cleaner's per-batch Python overhead was most of a pass. Only
 * uncompressed, non-control batches are given to them (the caller handles the others). Errors raise RecordError(row, record, message). */

#define FIELDS 9   /* columns of logcore.records.batch.batch_fields */
#define HDR 61
#define ATTR_TS_TYPE 0x08
#define ATTR_TXN 0x10
#define ATTR_CONTROL 0x20
#define ATTR_HORIZON 0x40

static inline void wr64(uint8_t *p, int64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v = (int64_t)((uint64_t)v >> 8); }
}
static inline void wr32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 24); p[1] = (uint8_t)(u >> 16); p[2] = (uint8_t)(u >> 8); p[3] = (uint8_t)u;
}
static inline void wr16(uint8_t *p, int v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

static void raise_batch_error(Py_ssize_t row, Py_ssize_t record, const char *message) {
    PyObject *err = Py_BuildValue("nns", row, record, message);
    PyErr_SetObject(RecordError, err);
    Py_XDECREF(err);
}

/* Checks the rows against the buffer; returns the rows pointer or NULL with an error set. */
static const int64_t *check_rows(Py_buffer *chunk, Py_buffer *rows, Py_ssize_t first, Py_ssize_t last) {
    Py_ssize_t n = rows->len / (Py_ssize_t)(FIELDS * 8);
    if (first < 0 || last < first || last > n) {
        PyErr_SetString(PyExc_ValueError, "row range outside the batch rows");
        return NULL;
    }
    const int64_t *f = (const int64_t *)rows->buf;
    for (Py_ssize_t i = first; i < last; i++) {
        int64_t pos = f[i * FIELDS], size = f[i * FIELDS + 1];
        if (pos < 0 || size < HDR || pos + size > chunk->len) {
            PyErr_SetString(PyExc_ValueError, "a batch row points outside the buffer");
            return NULL;
        }
    }
    return f;
}

/* map_batches(chunk, rows, first, last, include, table, slots, size, max_entries, min_offset,
 *             max_offset) -> (size, stop_offset)
 * Puts key -> offset for each keyed record with offset in [min_offset, max_offset) of the rows
 * in [first, last) whose include[row] is set, in order. stop_offset is the offset of the first
 * record not put because the map was full (its key new), or -1 when every record was put. */
static PyObject *map_batches(PyObject *self, PyObject *args) {
    Py_buffer chunk, rows, inc, tv;
    PyObject *table_obj;
    Py_ssize_t first, last;
    unsigned long long slots, size, max_entries;
    long long min_offset, max_offset;
    if (!PyArg_ParseTuple(args, "y*y*nny*OKKKLL", &chunk, &rows, &first, &last, &inc, &table_obj, &slots,
                          &size, &max_entries, &min_offset, &max_offset))
        return NULL;
    PyObject *result = NULL;
    int have_table = 0;
    const int64_t *f = check_rows(&chunk, &rows, first, last);
    if (f == NULL)
        goto done;
    if (inc.len < last) {
        PyErr_SetString(PyExc_ValueError, "include mask is shorter than the rows");
        goto done;
    }
    if (get_table(table_obj, &tv, slots) < 0)
        goto done;
    have_table = 1;
    slot_t *table = (slot_t *)tv.buf;
    const uint8_t *buf = (const uint8_t *)chunk.buf, *include = (const uint8_t *)inc.buf;
    long long stop = -1;
    Py_ssize_t bad_row = -1, bad_rec = -1;
    const char *error = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = first; b < last && stop < 0 && !error; b++) {
        if (!include[b])
            continue;
        const uint8_t *h = buf + f[b * FIELDS];
        int64_t base = be64(h);
        int32_t count = be32(h + 57);
        if (base + be32(h + 23) < min_offset || base >= max_offset)
            continue;
        const uint8_t *p = h + HDR, *end = h + f[b * FIELDS + 1];
        if (count < 0 || count > end - p) {
            error = "record count does not fit the batch";
            bad_row = b;
            break;
        }
        for (int32_t i = 0; i < count; i++) {
            record_view rv;
            if ((error = parse_record(&p, end, &rv)) != NULL) {
                bad_row = b; bad_rec = i;
                break;
            }
            int64_t offset = base + rv.offset_delta;
            int64_t klen = rv.klen;
            if (klen < 0 || offset < min_offset || offset >= max_offset)
                continue;
            uint64_t h1, h2;
            hash128(rv.key, (size_t)klen, &h1, &h2);
            slot_t *s = find_slot(table, slots, h1, h2);
            int is_new = s == NULL || (s->h1 == 0 && s->h2 == 0);
            if (is_new && (size >= max_entries || s == NULL)) {
                stop = offset;
                break;
            }
            if (is_new) {
                s->h1 = h1;
                s->h2 = h2;
                size++;
            }
            s->offset = offset;
        }
        if (!error && stop < 0 && p != end) {
            error = "trailing bytes after the last record";
            bad_row = b; bad_rec = count;
        }
    }
    Py_END_ALLOW_THREADS
    if (error)
        raise_batch_error(bad_row, bad_rec, error);
    else
        result = Py_BuildValue("KL", size, stop);
done:
    if (have_table)
        PyBuffer_Release(&tv);
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&inc);
    return result;
}

static int in_keep_set(const int64_t *lasts, const int64_t *pids, Py_ssize_t n, int64_t last, int64_t pid) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (lasts[mid] < last) lo = mid + 1; else hi = mid;
    }
    for (; lo < n && lasts[lo] == last; lo++)
        if (pids[lo] == pid)
            return 1;
    return 0;
}

/* clean_batches(chunk, rows, first, last, table, slots, latest_offset, end_offset, now_ms,
 *               horizon_ms, keep_lasts, keep_pids)
 *   -> (data, meta, records_read, records_kept, tombstones_removed)
 * The cleaned bytes of the data batches in rows [first, last) (uncompressed, non-control, not
 * aborted): a batch whose records all stay (and that needs no delete horizon) is copied byte
 * for byte; one with some records left is rebuilt (header, records, CRC); an emptied batch is
 * dropped, or kept as a bare header when it ends at end_offset or its (last offset, producer id)
 * is in the sorted keep_lasts/keep_pids (producer state needs it). meta holds one int64 row
 * (last offset, max timestamp, size) per written batch. */
static PyObject *clean_batches(PyObject *self, PyObject *args) {
    Py_buffer chunk, rows, tv, kl, kp;
    PyObject *table_obj;
    Py_ssize_t first, last;
    unsigned long long slots;
    long long latest, end_offset, now_ms, horizon;
    if (!PyArg_ParseTuple(args, "y*y*nnOKLLLLy*y*", &chunk, &rows, &first, &last, &table_obj, &slots,
                          &latest, &end_offset, &now_ms, &horizon, &kl, &kp))
        return NULL;
    PyObject *result = NULL;
    int have_table = 0;
    uint8_t *out = NULL;
    int64_t *meta = NULL;
    rec_t *recs = NULL;
    const int64_t *f = check_rows(&chunk, &rows, first, last);
    if (f == NULL)
        goto done;
    if (get_table(table_obj, &tv, slots) < 0)
        goto done;
    have_table = 1;
    Py_ssize_t n_keep = kl.len / 8;
    if (kp.len / 8 != n_keep) {
        PyErr_SetString(PyExc_ValueError, "keep_lasts and keep_pids differ in length");
        goto done;
    }
    /* Output is at most the input plus 15 bytes a record (re-encoded timestamp deltas); the
     * count of records is bounded by the section length. */
    Py_ssize_t capacity = 0, max_records = 1;
    for (Py_ssize_t b = first; b < last; b++) {
        Py_ssize_t size = f[b * FIELDS + 1];
        Py_ssize_t count = be32((const uint8_t *)chunk.buf + f[b * FIELDS] + 57);
        if (count < 0 || count > size - HDR)
            count = 0;      /* reported in the main loop */
        capacity += size + 16 * count;
        if (count > max_records)
            max_records = count;
    }
    out = PyMem_Malloc(capacity ? capacity : 1);
    meta = PyMem_Malloc(sizeof(int64_t) * 3 * (last - first ? last - first : 1));
    recs = PyMem_Malloc(sizeof(rec_t) * max_records);
    if (!out || !meta || !recs) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *buf = (const uint8_t *)chunk.buf;
    const slot_t *table = (const slot_t *)tv.buf;
    const int64_t *keep_lasts = (const int64_t *)kl.buf, *keep_pids = (const int64_t *)kp.buf;
    Py_ssize_t w = 0, m = 0, records_read = 0, records_kept = 0, tombstones_removed = 0;
    Py_ssize_t bad_row = -1, bad_rec = -1;
    const char *error = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = first; b < last; b++) {
        const uint8_t *h = buf + f[b * FIELDS];
        Py_ssize_t size = f[b * FIELDS + 1];
        int attrs = (h[21] << 8) | h[22];
        int64_t base = be64(h), last_offset = base + be32(h + 23);
        int64_t base_ts = be64(h + 27), max_ts_h = be64(h + 35), pid = be64(h + 43);
        int32_t count = be32(h + 57);
        if (count < 0 || count > size - HDR) {
            error = "record count does not fit the batch";
            bad_row = b;
            break;
        }
        int has_horizon = (attrs & ATTR_HORIZON) != 0;
        int drop_tombstones = has_horizon && base_ts <= now_ms;
        decision_t d;
        decide_records(h + HDR, size - HDR, count, table, slots, base, latest, drop_tombstones, base_ts, recs, &d);
        if (d.bad >= 0) {
            error = d.error;
            bad_row = b; bad_rec = d.bad;
            break;
        }
        records_read += count;
        records_kept += d.kept;
        tombstones_removed += d.tombstones_removed;
        int set_horizon = base <= latest && !has_horizon && d.tombstones_kept > 0;
        uint8_t *o = out + w;
        Py_ssize_t written;
        int64_t max_ts = max_ts_h;
        if (d.kept == count && !set_horizon) {
            memcpy(o, h, size);
            written = size;
        } else {
            if (d.kept == 0 && !(last_offset + 1 == end_offset ||
                                 (pid >= 0 && in_keep_set(keep_lasts, keep_pids, n_keep, last_offset, pid))))
                continue;    /* dropped */
            int new_attrs;
            int64_t new_base_ts;
            if (d.kept == 0) {
                /* Kafka's empty batch: no records, offsets and producer fields kept. */
                new_attrs = attrs & (ATTR_TS_TYPE | ATTR_TXN | ATTR_CONTROL);
                new_base_ts = -1;
                written = HDR;
            } else {
                new_attrs = attrs | (set_horizon ? ATTR_HORIZON : 0);
                new_base_ts = set_horizon ? horizon : base_ts;
                int64_t shift = set_horizon ? base_ts - horizon : 0;
                written = HDR + write_kept(h + HDR, count, recs, shift, o + HDR);
                if (!(attrs & ATTR_TS_TYPE))
                    max_ts = d.max_ts;
            }
            memcpy(o, h, HDR);      /* offsets, epoch, magic, producer fields as they were */
            wr32(o + 8, (int32_t)(written - 12));
            wr16(o + 21, new_attrs);
            wr64(o + 27, new_base_ts);
            wr64(o + 35, max_ts);
            wr32(o + 57, (int32_t)d.kept);
            wr32(o + 17, (int32_t)crc32c_of(o + 21, written - 21));
        }
        meta[3 * m] = last_offset;
        meta[3 * m + 1] = max_ts;
        meta[3 * m + 2] = written;
        m++;
        w += written;
    }
    Py_END_ALLOW_THREADS
    if (error) {
        raise_batch_error(bad_row, bad_rec, error);
        goto done;
    }
    PyObject *data = PyBytes_FromStringAndSize((const char *)out, w);
    PyObject *meta_bytes = data ? PyBytes_FromStringAndSize((const char *)meta, m * 3 * 8) : NULL;
    if (data && meta_bytes)
        result = Py_BuildValue("NNnnn", data, meta_bytes, records_read, records_kept, tombstones_removed);
    else {
        Py_XDECREF(data);
        Py_XDECREF(meta_bytes);
    }
done:
    PyMem_Free(out);
    PyMem_Free(meta);
    PyMem_Free(recs);
    if (have_table)
        PyBuffer_Release(&tv);
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&kl);
    PyBuffer_Release(&kp);
    return result;
}

static PyMethodDef methods[] = {
    {"put_keys", put_keys, METH_VARARGS, "Put a key column's offsets into the table, in row order."},
    {"get_keys", get_keys, METH_VARARGS, "Look a key column up in the table (-1 when absent)."},
    {"filter_records", filter_records, METH_VARARGS,
     "Keep the records of one batch section that the offset map says are live."},
    {"map_batches", map_batches, METH_VARARGS, "Put the keys of many uncompressed data batches into the table."},
    {"clean_batches", clean_batches, METH_VARARGS,
     "The cleaned bytes of many uncompressed data batches, with one (last offset, max timestamp, size) row each."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_offsetmap",
                                    "Offset map and record filtering of the log cleaner.", -1, methods};

PyMODINIT_FUNC PyInit__offsetmap(void) {
    crc32c_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    RecordError = PyErr_NewException("logcore.cleaner._offsetmap.RecordError", NULL, NULL);
    if (RecordError == NULL || PyModule_AddObject(m, "RecordError", RecordError) < 0)
        return NULL;
    Py_INCREF(RecordError);
    return m;
}

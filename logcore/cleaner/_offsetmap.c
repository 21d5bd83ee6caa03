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
 * delta when the batch's base timestamp changes (the delete horizon). Nothing is read outside the
 * given buffers; corrupt records raise RecordError(record_index, message).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

typedef struct {
    const uint8_t *p, *end;
    const char *error;
} reader_t;

static int64_t read_varlong(reader_t *r, int max_bytes) {
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (r->p >= r->end) {
            r->error = "varint runs past the end of the record";
            return 0;
        }
        uint8_t b = *r->p++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        shift += 7;
    }
    r->error = "varint is too long";
    return 0;
}

static int write_varlong(uint8_t *out, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 0;
    while (z >= 0x80) {
        out[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    out[n++] = (uint8_t)z;
    return n;
}

/* filter_records(section, count, table, slots, base_offset, latest_offset, drop_tombstones,
 *                old_base_ts, horizon_if_tombstones, has_horizon)
 *   -> (kept_bytes, kept, max_timestamp, tombstones_removed, horizon_set)
 *
 * Keep rule (Kafka's): offset > latest_offset, or a key whose mapped offset is <= offset (absent
 * keys are kept); a kept null value (tombstone) is dropped when drop_tombstones. When
 * horizon_if_tombstones is not INT64_MIN and the batch has no horizon yet and a tombstone is
 * kept, the kept records' timestamp deltas are re-encoded against that horizon (the new base
 * timestamp) and horizon_set is 1. */
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
    slot_t *table = (slot_t *)tv.buf;
    const uint8_t *data = (const uint8_t *)sv.buf;
    Py_ssize_t len = sv.len;
    if (count < 0 || count > len) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&tv);
        PyErr_SetString(PyExc_ValueError, "record count does not fit the section");
        return NULL;
    }
    /* Pass 1: decisions. Per record: start, end, position of the timestamp delta and what follows. */
    Py_ssize_t *starts = PyMem_Malloc(sizeof(Py_ssize_t) * 4 * (count ? count : 1));
    uint8_t *keep = PyMem_Malloc(count ? count : 1);
    int64_t *deltas = PyMem_Malloc(sizeof(int64_t) * (count ? count : 1));
    if (!starts || !keep || !deltas) {
        PyMem_Free(starts);
        PyMem_Free(keep);
        PyMem_Free(deltas);
        PyBuffer_Release(&sv);
        PyBuffer_Release(&tv);
        return PyErr_NoMemory();
    }
    reader_t r = {data, data + len, NULL};
    Py_ssize_t kept = 0, kept_bytes = 0, tombstones_removed = 0, tombstones_kept = 0, bad = -1;
    int64_t max_ts = INT64_MIN;
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *rec_start = r.p;
        int64_t length = read_varlong(&r, 5);
        if (r.error) { bad = i; break; }
        if (length < 0 || length > r.end - r.p) { r.error = "record length does not fit the section"; bad = i; break; }
        reader_t rr = {r.p, r.p + length, NULL};
        const uint8_t *body = r.p;
        rr.p++; /* attributes */
        const uint8_t *ts_pos = rr.p;
        int64_t ts_delta = read_varlong(&rr, 10);
        const uint8_t *after_ts = rr.p;
        int64_t offset_delta = read_varlong(&rr, 5);
        int64_t klen = read_varlong(&rr, 5);
        if (rr.error || rr.p > rr.end) { r.error = rr.error ? rr.error : "record too short"; bad = i; break; }
        const uint8_t *key = rr.p;
        if (klen < -1 || klen > rr.end - rr.p) { r.error = "key length does not fit the record"; bad = i; break; }
        if (klen > 0)
            rr.p += klen;
        int64_t vlen = read_varlong(&rr, 5);
        if (rr.error) { r.error = rr.error; bad = i; break; }
        if (vlen < -1 || vlen > rr.end - rr.p) { r.error = "value length does not fit the record"; bad = i; break; }
        int64_t offset = base_offset + offset_delta;
        int k = 1;
        if (offset <= latest_offset) {
            if (klen < 0) {
                k = 0;
            } else {
                uint64_t h1, h2;
                hash128(key, (size_t)klen, &h1, &h2);
                slot_t *s = find_slot(table, slots, h1, h2);
                if (s != NULL && !(s->h1 == 0 && s->h2 == 0) && s->offset > offset)
                    k = 0;
            }
            if (k && vlen < 0 && drop_tombstones)
                k = 0;
        }
        if (vlen < 0) {
            if (k) tombstones_kept++; else tombstones_removed++;
        }
        keep[i] = (uint8_t)k;
        starts[4 * i] = rec_start - data;
        starts[4 * i + 1] = ts_pos - data;
        starts[4 * i + 2] = after_ts - data;
        starts[4 * i + 3] = (body + length) - data;
        deltas[i] = ts_delta;
        if (k) {
            kept++;
            kept_bytes += (body + length) - rec_start;
            if (old_base_ts + ts_delta > max_ts)
                max_ts = old_base_ts + ts_delta;
        }
        r.p = body + length;
    }
    if (bad < 0 && r.p != r.end) {
        r.error = "trailing bytes after the last record";
        bad = count;
    }
    PyObject *result = NULL;
    if (bad >= 0) {
        PyObject *err = Py_BuildValue("ns", bad, r.error);
        PyErr_SetObject(RecordError, err);
        Py_XDECREF(err);
        goto done;
    }
    int set_horizon = horizon != INT64_MIN && !has_horizon && tombstones_kept > 0;
    int64_t shift = set_horizon ? (int64_t)old_base_ts - (int64_t)horizon : 0;
    /* Pass 2: write the kept records (a re-encoded delta grows a record by at most 15 bytes). */
    PyObject *out = PyBytes_FromStringAndSize(NULL, kept_bytes + (shift ? kept * 16 : 0));
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!keep[i])
            continue;
        Py_ssize_t rs = starts[4 * i], tp = starts[4 * i + 1], at = starts[4 * i + 2], re = starts[4 * i + 3];
        if (!shift) {
            memcpy(o + w, data + rs, re - rs);
            w += re - rs;
            continue;
        }
        uint8_t ts_buf[10], len_buf[5];
        int ts_n = write_varlong(ts_buf, deltas[i] + shift);
        int64_t body_len = 1 + ts_n + (re - at);
        int len_n = write_varlong(len_buf, body_len);
        memcpy(o + w, len_buf, len_n); w += len_n;
        o[w++] = data[tp - 1]; /* attributes */
        memcpy(o + w, ts_buf, ts_n); w += ts_n;
        memcpy(o + w, data + at, re - at); w += re - at;
    }
    if (_PyBytes_Resize(&out, w) < 0)
        goto done;
    result = Py_BuildValue("NnLni", out, kept, (long long)max_ts, tombstones_removed, set_horizon);
done:
    PyMem_Free(starts);
    PyMem_Free(keep);
    PyMem_Free(deltas);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&tv);
    return result;
}

static PyMethodDef methods[] = {
    {"put_keys", put_keys, METH_VARARGS, "Put a key column's offsets into the table, in row order."},
    {"get_keys", get_keys, METH_VARARGS, "Look a key column up in the table (-1 when absent)."},
    {"filter_records", filter_records, METH_VARARGS,
     "Keep the records of one batch section that the offset map says are live."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_offsetmap",
                                    "Offset map and record filtering of the log cleaner.", -1, methods};

PyMODINIT_FUNC PyInit__offsetmap(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    RecordError = PyErr_NewException("logcore.cleaner._offsetmap.RecordError", NULL, NULL);
    if (RecordError == NULL || PyModule_AddObject(m, "RecordError", RecordError) < 0)
        return NULL;
    Py_INCREF(RecordError);
    return m;
}

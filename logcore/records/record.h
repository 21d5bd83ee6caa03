/* One record of a RecordBatch v2 records section, parsed and checked as Kafka reads a
 * DefaultRecord: the one C record parser, used by the decoder and the produce check
 * (_fastcodec.c) and by the cleaner's filter and key mapping (logcore/cleaner/_offsetmap.c).
 * Include <Python.h> first (Py_ssize_t). */
#ifndef SEGLOG_RECORD_H
#define SEGLOG_RECORD_H

#include <stdint.h>

#include "varint.h"

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF), as Python's decoder. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            uint8_t c1;
            if (i + 2 >= n)
                return 0;
            c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && c1 < 0xA0)
                return 0; /* overlong */
            if (c == 0xED && c1 >= 0xA0)
                return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            uint8_t c1;
            if (i + 3 >= n)
                return 0;
            c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && c1 < 0x90)
                return 0;
            if (c == 0xF4 && c1 >= 0x90)
                return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* One record's fields, as parse_record found them (key/value length -1: null). */
typedef struct {
    int64_t ts_delta;
    int32_t offset_delta, klen, vlen, hcount;
    const uint8_t *key, *value, *headers; /* headers: where the hcount headers start */
    const uint8_t *attributes, *after_ts;  /* the attributes byte; the offset delta's first byte */
} record_view;

#define RECORD_VARINT(dst, limit, what)                                                           \
    do {                                                                                          \
        int rc_ = read_varint(&p, (limit), &(dst));                                               \
        if (rc_ == -1)                                                                            \
            return what " runs past the end of the record";                                       \
        if (rc_ == -2)                                                                            \
            return what " is a varint longer than 5 bytes";                                       \
    } while (0)

/* The record at *pp of a records section that ends at `e`: every field checked as Kafka reads
 * a DefaultRecord (lengths, varint sizes, UTF-8 header keys, nothing left over). On success *pp
 * moves past the record and NULL is returned; otherwise the error message. */
static const char *parse_record(const uint8_t **pp, const uint8_t *e, record_view *rv) {
    const uint8_t *p = *pp, *re;
    int32_t length;
    int rc = read_varint(&p, e, &length);
    if (rc == -1)
        return "record length runs past the end of the batch";
    if (rc == -2)
        return "record length is a varint longer than 5 bytes";
    if (length < 0 || length > e - p)
        return "record length does not fit the bytes left in the batch";
    re = p + length;
    if (p >= re)
        return "record attributes run past the end of the record";
    rv->attributes = p++; /* attributes: unused by Kafka's v2 records */
    rc = read_varlong(&p, re, &rv->ts_delta);
    if (rc == -1)
        return "timestamp delta runs past the end of the record";
    if (rc == -2)
        return "timestamp delta is a varlong longer than 10 bytes";
    rv->after_ts = p;
    RECORD_VARINT(rv->offset_delta, re, "offset delta");
    RECORD_VARINT(rv->klen, re, "key length");
    if (rv->klen < -1 || rv->klen > re - p)
        return "key length does not fit the record";
    rv->key = p;
    if (rv->klen > 0)
        p += rv->klen;
    RECORD_VARINT(rv->vlen, re, "value length");
    if (rv->vlen < -1 || rv->vlen > re - p)
        return "value length does not fit the record";
    rv->value = p;
    if (rv->vlen > 0)
        p += rv->vlen;
    RECORD_VARINT(rv->hcount, re, "header count");
    if (rv->hcount < 0)
        return "negative header count";
    if (rv->hcount > re - p)
        return "header count is larger than the bytes left in the record";
    rv->headers = p;
    for (int32_t i = 0; i < rv->hcount; i++) {
        int32_t hklen, hvlen;
        const uint8_t *hk;
        RECORD_VARINT(hklen, re, "header key length");
        if (hklen < 0 || hklen > re - p)
            return "header key length is negative or does not fit the record";
        hk = p;
        p += hklen;
        if (!valid_utf8(hk, hklen))
            return "header key is not valid UTF-8";
        RECORD_VARINT(hvlen, re, "header value length");
        if (hvlen < -1 || hvlen > re - p)
            return "header value length does not fit the record";
        if (hvlen > 0)
            p += hvlen;
    }
    if (p != re)
        return "record length does not match the bytes its fields use";
    *pp = p;
    return NULL;
}

#endif

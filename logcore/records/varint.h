/* Kafka's zigzag varint (int32) and varlong (int64), read and written: the one C varint codec,
 * shared by the record codec (_fastcodec.c, via record.h) and the cleaner's offset map
 * (logcore/cleaner/_offsetmap.c). Its Python counterpart is logcore/records/varint.py. */
#ifndef SEGLOG_VARINT_H
#define SEGLOG_VARINT_H

#include <stdint.h>

/* Zigzag varint of at most 5 bytes; bits past 32 are dropped as Java does.
 * Returns 0, -1 (runs past end) or -2 (too long). */
static inline int read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *pp;
    uint32_t raw = 0;
    int i;
    if (p < end && *p < 0x80) {
        raw = *p;
        *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
        *pp = p + 1;
        return 0;
    }
    for (i = 0; i < 5; i++) {
        uint8_t b;
        if (p >= end)
            return -1;
        b = *p++;
        raw |= (uint32_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

static inline int read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    int i;
    if (p < end && *p < 0x80) {
        raw = *p;
        *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
        *pp = p + 1;
        return 0;
    }
    for (i = 0; i < 10; i++) {
        uint8_t b;
        if (p >= end)
            return -1;
        b = *p++;
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

static inline char *put_uvarint(char *p, uint64_t v) {
    if (v < 0x80) {                 /* the common sizes first: lengths and deltas are small */
        *p = (char)v;
        return p + 1;
    }
    if (v < 0x4000) {
        p[0] = (char)(v | 0x80);
        p[1] = (char)(v >> 7);
        return p + 2;
    }
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static inline uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline char *put_varlong(char *p, int64_t v) {
    return put_uvarint(p, zigzag(v));
}

/* Bytes of the varint of v: one per started 7 bits (branch-free: the bit length times 9/64
 * rounds up exactly for 1..64 bits). */
static inline int uvarint_size(uint64_t v) {
    int bits = 64 - __builtin_clzll(v | 1);
    return (bits * 9 + 64) >> 6;
}

static inline int varlong_size(int64_t v) {
    return uvarint_size(zigzag(v));
}

#endif

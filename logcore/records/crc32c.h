/*
 * CRC-32C (Castagnoli), the checksum of RecordBatch v2, for the C extensions: the SSE4.2
 * instruction where the CPU has it, a table otherwise. Call crc32c_init() once at module
 * init; crc32c_of() may then run without the GIL.
 */
#ifndef SEGLOG_CRC32C_H
#define SEGLOG_CRC32C_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc32c_table[256];
static int crc32c_hw_ok = 0;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SEGLOG_HAVE_HW_CRC 1

/*
 * The crc32 instruction has a latency of three cycles but can start one per cycle, so one
 * dependent chain uses a third of it. Long inputs run as three lanes (three adjacent blocks of
 * `lane` bytes, each a chain of its own), then the lanes' registers are joined. The raw CRC
 * register is linear over GF(2) in (register, data), so
 *     crc(A B C) = Z2(crc(A)) ^ Z1(crc0(B)) ^ crc0(C)
 * where crc0 starts from a zero register and Z1/Z2 advance a register over `lane`/2*`lane` zero
 * bytes: a linear map of 32 bits, applied with four 256-entry tables.
 */
#define CRC_LANE_LONG 4096
#define CRC_LANE_SHORT 256

typedef struct { uint32_t t[4][256]; } crc32c_shift_t;
static crc32c_shift_t crc32c_long1, crc32c_long2, crc32c_short1, crc32c_short2;

static inline uint32_t crc32c_shift(const crc32c_shift_t *z, uint32_t c) {
    return z->t[0][c & 0xff] ^ z->t[1][(c >> 8) & 0xff] ^ z->t[2][(c >> 16) & 0xff] ^ z->t[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_zeros(uint32_t crc, Py_ssize_t n) {
    uint64_t c = crc;
    for (Py_ssize_t i = 0; i < n; i += 8)
        c = __builtin_ia32_crc32di(c, 0);
    return (uint32_t)c;
}

/* Tables for advancing a register over `n` zero bytes (n a multiple of 8), one and two times. */
__attribute__((target("sse4.2"))) static void crc32c_make_shift(crc32c_shift_t *z1, crc32c_shift_t *z2,
                                                                 Py_ssize_t n) {
    uint32_t basis1[32], basis2[32];
    for (int i = 0; i < 32; i++)
        basis1[i] = crc32c_hw_zeros(1u << i, n);
    for (int i = 0; i < 32; i++) {       /* Z2 = Z1 applied twice, by linearity over basis1 */
        uint32_t v = 0, x = basis1[i];
        for (int j = 0; j < 32; j++)
            if (x >> j & 1)
                v ^= basis1[j];
        basis2[i] = v;
    }
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t v1 = 0, v2 = 0;
            for (int j = 0; j < 8; j++)
                if (b >> j & 1) {
                    v1 ^= basis1[8 * k + j];
                    v2 ^= basis2[8 * k + j];
                }
            z1->t[k][b] = v1;
            z2->t[k][b] = v2;
        }
}

__attribute__((target("sse4.2"))) static const uint8_t *crc32c_hw_lanes(
        uint64_t *crc, const uint8_t *p, Py_ssize_t *n, Py_ssize_t lane,
        const crc32c_shift_t *z1, const crc32c_shift_t *z2) {
    uint64_t c0 = *crc;
    while (*n >= 3 * lane) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + lane;
        do {
            uint64_t a, b, d;
            memcpy(&a, p, 8);
            memcpy(&b, p + lane, 8);
            memcpy(&d, p + 2 * lane, 8);
            c0 = __builtin_ia32_crc32di(c0, a);
            c1 = __builtin_ia32_crc32di(c1, b);
            c2 = __builtin_ia32_crc32di(c2, d);
            p += 8;
        } while (p < end);
        c0 = crc32c_shift(z2, (uint32_t)c0) ^ crc32c_shift(z1, (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * lane;
        *n -= 3 * lane;
    }
    *crc = c0;
    return p;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, Py_ssize_t n) {
    uint64_t c = crc;
    p = crc32c_hw_lanes(&c, p, &n, CRC_LANE_LONG, &crc32c_long1, &crc32c_long2);
    p = crc32c_hw_lanes(&c, p, &n, CRC_LANE_SHORT, &crc32c_short1, &crc32c_short2);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
#ifdef SEGLOG_HAVE_HW_CRC
    crc32c_hw_ok = __builtin_cpu_supports("sse4.2");
    if (crc32c_hw_ok) {
        crc32c_make_shift(&crc32c_long1, &crc32c_long2, CRC_LANE_LONG);
        crc32c_make_shift(&crc32c_short1, &crc32c_short2, CRC_LANE_SHORT);
    }
#endif
}

/* The CRC register after `n` more bytes: a checksum can be built piece by piece, e.g. over
 * the parts of a batch as they are written. Start from CRC32C_START; the checksum is ~register. */
#define CRC32C_START 0xffffffffu

static uint32_t crc32c_extend(uint32_t crc, const uint8_t *p, Py_ssize_t n) {
#ifdef SEGLOG_HAVE_HW_CRC
    if (crc32c_hw_ok)
        return crc32c_hw(crc, p, n);
#endif
    while (n--)
        crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static uint32_t crc32c_of(const uint8_t *p, Py_ssize_t n) {
    return ~crc32c_extend(CRC32C_START, p, n);
}

#endif

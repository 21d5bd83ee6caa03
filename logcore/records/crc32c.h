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
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, Py_ssize_t n) {
    uint64_t c = crc;
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
#endif
}

static uint32_t crc32c_of(const uint8_t *p, Py_ssize_t n) {
#ifdef SEGLOG_HAVE_HW_CRC
    if (crc32c_hw_ok)
        return ~crc32c_hw(0xffffffffu, p, n);
#endif
    uint32_t crc = 0xffffffffu;
    while (n--)
        crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#endif

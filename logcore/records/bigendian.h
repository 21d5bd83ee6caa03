/* Big-endian integer fields, as Kafka's batch headers hold them. Shared by the record codec
 * (_fastcodec.c) and the cleaner's offset map (logcore/cleaner/_offsetmap.c). */
#ifndef SEGLOG_BIGENDIAN_H
#define SEGLOG_BIGENDIAN_H

#include <stdint.h>

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

#endif

/* A response frame written field by field, for the response encoders in C (producewire.c,
 * fetchwire.c): a growing buffer and Kafka's primitive types. */
#ifndef SEGLOG_WIREWRITER_H
#define SEGLOG_WIREWRITER_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} wbuf;

static inline int reserve(wbuf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap * 2 > b->len + more ? b->cap * 2 : b->len + more + 256;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void put_bytes(wbuf *b, const void *data, Py_ssize_t n) { memcpy(b->p + b->len, data, n), b->len += n; }

static inline void put_int(wbuf *b, uint64_t v, int width) {
    for (int i = width - 1; i >= 0; i--)
        b->p[b->len++] = (char)(v >> (8 * i));
}

static inline void put_uvarint(wbuf *b, uint64_t v) {
    while (v >= 0x80) {
        b->p[b->len++] = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    b->p[b->len++] = (char)v;
}

/* An array's (or bytes') length prefix, n < 0 for null; room for it reserved here. */
static inline int put_length(wbuf *b, long long n, int flexible, int wide) {
    if (reserve(b, 10) < 0)
        return -1;
    if (flexible)
        put_uvarint(b, (uint64_t)(n < 0 ? 0 : n + 1));
    else
        put_int(b, (uint64_t)(int64_t)n, wide ? 4 : 2);
    return 0;
}

static inline int put_string(wbuf *b, PyObject *value, int flexible) {
    if (value == Py_None)
        return put_length(b, -1, flexible, 0);
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(value, &n);
    if (data == NULL || put_length(b, n, flexible, 0) < 0 || reserve(b, n) < 0)
        return -1;
    put_bytes(b, data, n);
    return 0;
}

#endif

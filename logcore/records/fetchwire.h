/* Fetch requests decoded and responses encoded in C (fetchwire.c), listed in _fastcodec's method table. */
#ifndef SEGLOG_FETCHWIRE_H
#define SEGLOG_FETCHWIRE_H

#include <Python.h>

int fetchwire_init(void);
PyObject *decode_fetch_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

PyObject *encode_fetch_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif

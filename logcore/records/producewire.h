/* Produce requests decoded and responses encoded in C (producewire.c), listed in _fastcodec's
 * method table. */
#ifndef SEGLOG_PRODUCEWIRE_H
#define SEGLOG_PRODUCEWIRE_H

#include <Python.h>

int producewire_init(void);
PyObject *decode_produce_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *encode_produce_results(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif

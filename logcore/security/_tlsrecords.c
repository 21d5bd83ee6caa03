/*
 * _tlsrecords: decrypt every complete TLS record waiting in a Python SSLObject in one call.
 *
 * asyncio's TLS protocol calls SSLObject.read once per TLS record (one GIL release and retake,
 * one memoryview slice each); librdkafka writes a record's ~10 B header and its 1 KiB value as
 * two TLS records, so the broker paid that per-call cost twice per produced record. read_into
 * loops OpenSSL's SSL_read_ex over what has arrived, with the GIL released once.
 *
 * read_into also turns on OpenSSL's read-ahead for the connection (SSL_set_read_ahead; the
 * handshake is over by the first read, so it never sees read-ahead). Without it OpenSSL takes
 * each record out of the memory BIO in two BIO_read calls, its 5 B header then its body; with it,
 * one BIO_read fills the record buffer (about 16 KiB: a dozen of librdkafka's records), and the
 * records are then taken from there. What is read ahead stays in OpenSSL, not in the BIO: asyncio's
 * later reads (SSLObject.read, unwrap) take it from there as read_into does.
 *
 * No OpenSSL headers are needed to build: SSL and BIO are opaque here and the functions used are
 * resolved at run time (bind) from the libssl that Python's own _ssl module loaded, so the SSL
 * object and the functions come from the same library copy. dlopen of _ssl's own file with
 * RTLD_NOLOAD returns the module already loaded (never a second copy), and dlsym on that handle
 * searches the module and the libraries it was linked with, which is where its libssl and
 * libcrypto are.
 *
 * The SSL* is read from _ssl's object (_ssl._SSLSocket, CPython's Modules/_ssl.c): its struct
 * starts PyObject_HEAD, PyObject *Socket, SSL *ssl, unchanged from Python 3.7 to 3.14. Before
 * any read that pointer is checked: _ssl stores the object as the SSL's app data
 * (SSL_set_app_data, ex_data index 0), so SSL_get_ex_data(ssl, 0) must be the object itself.
 * Any mismatch (another Python, another layout) and the caller keeps asyncio's own read.
 *
 * buffer_socket puts OpenSSL's buffering BIO (BIO_f_buffer) in front of an SSLSocket's socket
 * BIO, on either side. Without it OpenSSL makes one system call per TLS record it writes (a
 * 256 KiB fetch chunk: 16 send()s, each a wake-up of the reader on loopback) and, with read-ahead,
 * one per ~16 KiB record buffer it fills; with it the records of one write leave in one send() and
 * reads take up to the buffer's size per recv(). The write buffer is emptied by flush (by OpenSSL
 * itself when it fills, and for its own messages: handshake, alerts, key updates, which it
 * flushes). Both sides keep the socket BIO, which is shared: it gets one reference per chain, so
 * SSL_free's BIO_free_all of each chain frees it once.
 *
 * read_into stops at the first SSL_read_ex that returns no data. "Want read" (no complete
 * record left) and a full buffer are the normal ends; anything else (close_notify, an error) is
 * left as OpenSSL left it, error queue included, for the caller's next SSLObject.read to
 * report exactly as it would have without this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03070000 || PY_VERSION_HEX >= 0x030F0000 || defined(Py_GIL_DISABLED)
#define KNOWN_LAYOUT 0      /* the struct below is not known to hold; bind refuses */
#else
#define KNOWN_LAYOUT 1
#endif

typedef struct ssl_st SSL;                      /* opaque */
typedef struct bio_st BIO;                      /* opaque */
typedef struct bio_method_st BIO_METHOD;        /* opaque */

/* OpenSSL's ssl.h and bio.h, stable since 0.9 (BIO_TYPE_SOCKET: 5 | SOURCE_SINK | DESCRIPTOR) */
#define SSL_ERROR_WANT_READ 2
#define BIO_TYPE_SOCKET (5 | 0x0400 | 0x0100)
#define BIO_CTRL_FLUSH 11
#define BIO_CTRL_WPENDING 13
#define BIO_C_SET_BUFF_SIZE 117
#define BIO_FLAGS_SHOULD_RETRY 0x08

typedef int (*read_ex_fn)(SSL *, void *, size_t, size_t *);
typedef int (*get_error_fn)(const SSL *, int);
typedef void *(*get_ex_data_fn)(const SSL *, int);
typedef void (*set_read_ahead_fn)(SSL *, int);
typedef BIO *(*get_bio_fn)(const SSL *);
typedef void (*set0_bio_fn)(SSL *, BIO *);
typedef const BIO_METHOD *(*bio_f_buffer_fn)(void);
typedef BIO *(*bio_new_fn)(const BIO_METHOD *);
typedef BIO *(*bio_push_fn)(BIO *, BIO *);
typedef int (*bio_up_ref_fn)(BIO *);
typedef int (*bio_free_fn)(BIO *);
typedef long (*bio_ctrl_fn)(BIO *, int, long, void *);
typedef int (*bio_test_flags_fn)(const BIO *, int);
typedef int (*bio_method_type_fn)(const BIO *);

/* The head of _ssl's PySSLSocket. */
typedef struct {
    PyObject_HEAD
    PyObject *socket_ref;
    SSL *ssl;
} ssl_socket_head;

static read_ex_fn ssl_read_ex;
static get_error_fn ssl_get_error;
static get_ex_data_fn ssl_get_ex_data;
static set_read_ahead_fn ssl_set_read_ahead;

/* What buffer_socket and flush use, resolved by bind with the rest. */
static struct {
    get_bio_fn get_rbio, get_wbio;
    set0_bio_fn set0_rbio, set0_wbio;
    bio_f_buffer_fn f_buffer;
    bio_new_fn new_bio;
    bio_push_fn push;
    bio_up_ref_fn up_ref;
    bio_free_fn free_bio;
    bio_ctrl_fn ctrl;
    bio_test_flags_fn test_flags;
    bio_method_type_fn method_type;
} bio_api;

/* (name, where its address goes): the BIO functions bind resolves. */
static const struct { const char *name; void **slot; } bio_symbols[] = {
    {"SSL_get_rbio", (void **)&bio_api.get_rbio},
    {"SSL_get_wbio", (void **)&bio_api.get_wbio},
    {"SSL_set0_rbio", (void **)&bio_api.set0_rbio},
    {"SSL_set0_wbio", (void **)&bio_api.set0_wbio},
    {"BIO_f_buffer", (void **)&bio_api.f_buffer},
    {"BIO_new", (void **)&bio_api.new_bio},
    {"BIO_push", (void **)&bio_api.push},
    {"BIO_up_ref", (void **)&bio_api.up_ref},
    {"BIO_free", (void **)&bio_api.free_bio},
    {"BIO_ctrl", (void **)&bio_api.ctrl},
    {"BIO_test_flags", (void **)&bio_api.test_flags},
    {"BIO_method_type", (void **)&bio_api.method_type},
};
#define N_BIO_SYMBOLS (sizeof(bio_symbols) / sizeof(bio_symbols[0]))
static PyTypeObject *ssl_socket_type;           /* _ssl._SSLSocket, from the object bound with */

/* The object's SSL*, or NULL when it is not an _ssl object laid out as expected. */
static SSL *
checked_ssl(PyObject *obj)
{
    if (ssl_read_ex == NULL || Py_TYPE(obj) != ssl_socket_type)
        return NULL;
    SSL *ssl = ((ssl_socket_head *)obj)->ssl;
    if (ssl == NULL || ssl_get_ex_data(ssl, 0) != (void *)obj)
        return NULL;
    return ssl;
}

PyDoc_STRVAR(bind_doc,
"bind(ssl_module_path, ssl_socket) -> None or str\n\n"
"Resolve SSL_read_ex, SSL_get_error, SSL_get_ex_data, SSL_set_read_ahead and the BIO functions\n"
"of buffer_socket and flush from the libssl of\n"
"the loaded module at ssl_module_path (Python's _ssl) and check the layout on ssl_socket (an _ssl._SSLSocket,\n"
"SSLObject._sslobj). None when read_into can be used; else the reason, and an earlier binding\n"
"stays as it was.");

static PyObject *
bind(PyObject *self, PyObject *args)
{
    const char *path;
    PyObject *probe;
    if (!PyArg_ParseTuple(args, "sO:bind", &path, &probe))
        return NULL;
    if (!KNOWN_LAYOUT)
        return PyUnicode_FromString("this Python's _ssl object layout is not known to this module");
    if (Py_TYPE(probe)->tp_basicsize < (Py_ssize_t)sizeof(ssl_socket_head)
        || strcmp(Py_TYPE(probe)->tp_name, "_ssl._SSLSocket") != 0)
        return PyUnicode_FromFormat("%s is not _ssl's socket object", Py_TYPE(probe)->tp_name);
    void *module = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (module == NULL) {
        const char *why = dlerror();
        return PyUnicode_FromFormat("%s is not loaded: %s", path, why ? why : "dlopen failed");
    }
    read_ex_fn read_ex = (read_ex_fn)dlsym(module, "SSL_read_ex");
    get_error_fn get_error = (get_error_fn)dlsym(module, "SSL_get_error");
    get_ex_data_fn get_ex_data = (get_ex_data_fn)dlsym(module, "SSL_get_ex_data");
    set_read_ahead_fn set_read_ahead = (set_read_ahead_fn)dlsym(module, "SSL_set_read_ahead");
    if (read_ex == NULL || get_error == NULL || get_ex_data == NULL || set_read_ahead == NULL) {
        dlclose(module);
        return PyUnicode_FromFormat("%s's libssl does not export SSL_read_ex, SSL_get_error,"
                                    " SSL_get_ex_data and SSL_set_read_ahead", path);
    }
    void *bio_found[N_BIO_SYMBOLS];
    for (size_t i = 0; i < N_BIO_SYMBOLS; i++) {
        bio_found[i] = dlsym(module, bio_symbols[i].name);
        if (bio_found[i] == NULL) {
            dlclose(module);
            return PyUnicode_FromFormat("%s's libssl and libcrypto do not export %s", path,
                                        bio_symbols[i].name);
        }
    }
    SSL *ssl = ((ssl_socket_head *)probe)->ssl;
    if (ssl == NULL || get_ex_data(ssl, 0) != (void *)probe) {
        dlclose(module);
        return PyUnicode_FromString("self-check failed: the SSL* read from _ssl's object does not"
                                    " point back to it");
    }
    /* The handle stays open (the module is loaded for the process's life anyway). */
    Py_INCREF(Py_TYPE(probe));
    Py_XSETREF(ssl_socket_type, Py_TYPE(probe));
    ssl_get_error = get_error;
    ssl_get_ex_data = get_ex_data;
    ssl_set_read_ahead = set_read_ahead;
    for (size_t i = 0; i < N_BIO_SYMBOLS; i++)
        *bio_symbols[i].slot = bio_found[i];
    ssl_read_ex = read_ex;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(check_doc,
"check(ssl_socket) -> bool\n\nWhether read_into can read from this _ssl._SSLSocket.");

static PyObject *
check(PyObject *self, PyObject *obj)
{
    return PyBool_FromLong(checked_ssl(obj) != NULL);
}

PyDoc_STRVAR(read_into_doc,
"read_into(ssl_socket, buffer, nbytes) -> int\n\n"
"Decrypt into buffer (writable, at most nbytes; nbytes <= 0 or beyond it: the whole buffer)\n"
"every complete TLS record the SSL object holds, with OpenSSL's read-ahead on from now on. n >= 0: n bytes read and the buffer is full\n"
"or no complete record is left. n < 0: -n - 1 bytes read, then OpenSSL stopped for something\n"
"else (close_notify, an error): SSLObject.read says what. ValueError if ssl_socket fails the\n"
"check, RuntimeError before a successful bind.");

static PyObject *
read_into(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_buffer view;
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "Ow*n:read_into", &obj, &view, &nbytes))
        return NULL;
    if (ssl_read_ex == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "_tlsrecords is not bound to a libssl");
        return NULL;
    }
    SSL *ssl = checked_ssl(obj);
    if (ssl == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "not an _ssl socket object this module can read");
        return NULL;
    }
    size_t len = (nbytes <= 0 || nbytes > view.len) ? (size_t)view.len : (size_t)nbytes;
    char *mem = view.buf;
    size_t done = 0;
    int stop = SSL_ERROR_WANT_READ;
    read_ex_fn read_ex = ssl_read_ex;           /* as bound now, whatever another bind does */
    get_error_fn get_error = ssl_get_error;
    ssl_set_read_ahead(ssl, 1);                 /* a field set: the same value every call */
    /* obj and view stay referenced by the caller and by the buffer export while unlocked. */
    Py_BEGIN_ALLOW_THREADS
    while (done < len) {
        size_t got = 0;
        int ret = read_ex(ssl, mem + done, len - done, &got);
        if (ret <= 0) {
            stop = get_error(ssl, ret);         /* peeks at the error queue, leaves it */
            break;
        }
        done += got;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (done < len && stop != SSL_ERROR_WANT_READ)
        return PyLong_FromSsize_t(-(Py_ssize_t)done - 1);
    return PyLong_FromSize_t(done);
}

PyDoc_STRVAR(buffer_socket_doc,
"buffer_socket(ssl_socket, read_size, write_size) -> None\n\n"
"Put a buffering BIO of read_size bytes in front of the socket BIO on the read side and one of\n"
"write_size bytes on the write side (0: that side left as it is) of a checked _ssl._SSLSocket\n"
"whose two sides are still its one socket BIO (after the handshake). What is written stays in\n"
"the write buffer until it fills or flush is called. ValueError if ssl_socket fails the check\n"
"or is not on a plain socket BIO, MemoryError if a BIO cannot be made.");

static PyObject *
buffer_socket(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int read_size, write_size;
    if (!PyArg_ParseTuple(args, "Oii:buffer_socket", &obj, &read_size, &write_size))
        return NULL;
    SSL *ssl = checked_ssl(obj);
    BIO *sock = ssl ? bio_api.get_rbio(ssl) : NULL;
    if (sock == NULL || bio_api.get_wbio(ssl) != sock
        || bio_api.method_type(sock) != BIO_TYPE_SOCKET || read_size < 0 || write_size < 0) {
        PyErr_SetString(PyExc_ValueError, "not an _ssl socket object on its own socket BIO");
        return NULL;
    }
    BIO *rbuf = read_size ? bio_api.new_bio(bio_api.f_buffer()) : NULL;
    BIO *wbuf = write_size ? bio_api.new_bio(bio_api.f_buffer()) : NULL;
    int read_side = 0, write_side = 1;          /* BIO_set_read/write_buffer_size's argument */
    if ((read_size && (rbuf == NULL
                       || bio_api.ctrl(rbuf, BIO_C_SET_BUFF_SIZE, read_size, &read_side) <= 0))
        || (write_size && (wbuf == NULL
                           || bio_api.ctrl(wbuf, BIO_C_SET_BUFF_SIZE, write_size, &write_side) <= 0))) {
        if (rbuf != NULL)
            bio_api.free_bio(rbuf);
        if (wbuf != NULL)
            bio_api.free_bio(wbuf);
        return PyErr_NoMemory();
    }
    /* Each chain takes a reference to the socket BIO; SSL_set0_* drops the one of the side it
     * replaces (SSL_set_fd gave the socket BIO one per side). */
    if (wbuf != NULL) {
        bio_api.up_ref(sock);
        bio_api.set0_wbio(ssl, bio_api.push(wbuf, sock));
    }
    if (rbuf != NULL) {
        bio_api.up_ref(sock);
        bio_api.set0_rbio(ssl, bio_api.push(rbuf, sock));
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(flush_doc,
"flush(ssl_socket) -> int\n\n"
"Send what the write side's BIOs hold to the socket, as much as it takes now (one send() for a\n"
"buffer_socket write buffer). Returns the bytes still held (0: all sent; more: the socket is\n"
"full, flush again when it is writable). OSError for the socket's error (the connection is\n"
"broken), ValueError if ssl_socket fails the check.");

static PyObject *
flush(PyObject *self, PyObject *obj)
{
    SSL *ssl = checked_ssl(obj);
    if (ssl == NULL) {
        PyErr_SetString(PyExc_ValueError, "not an _ssl socket object this module can read");
        return NULL;
    }
    BIO *wbio = bio_api.get_wbio(ssl);
    if (wbio == NULL)
        return PyLong_FromLong(0);
    long ret, left;
    int retry, err;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    ret = bio_api.ctrl(wbio, BIO_CTRL_FLUSH, 0, NULL);
    err = errno;
    retry = bio_api.test_flags(wbio, BIO_FLAGS_SHOULD_RETRY);
    left = bio_api.ctrl(wbio, BIO_CTRL_WPENDING, 0, NULL);
    Py_END_ALLOW_THREADS
    if (ret <= 0 && !retry) {
        errno = err ? err : EPIPE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(left);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"check", check, METH_O, check_doc},
    {"read_into", read_into, METH_VARARGS, read_into_doc},
    {"buffer_socket", buffer_socket, METH_VARARGS, buffer_socket_doc},
    {"flush", flush, METH_O, flush_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tlsrecords",
    "Every complete TLS record of a Python SSLObject decrypted in one call (see the C source).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__tlsrecords(void)
{
    return PyModule_Create(&module_def);
}

/* The per-request tail of SigV4 signing, on OpenSSL's SHA-256.
 *
 * Each signed request hashes its body, then finishes three SHA-256 states
 * presigned once a second (the canonical request up to the payload hash, and
 * the HMAC's inner and outer states). Through hashlib each step costs a
 * Python call, and every copy of a state and every digest copies an OpenSSL
 * EVP context (an allocation, a provider call and a cleanse); here a state is
 * the plain SHA256_CTX, copied with memcpy, and the whole tail is one call.
 * The hashing is OpenSSL's (with the CPU's SHA extensions where it has them);
 * this file only sequences it. gateway/_aws/sigv4.py uses it when it loads
 * and falls back to hashlib otherwise, with the same results (tests compare
 * the two, and both with botocore).
 *
 * It uses the libcrypto that Python's own _hashlib has loaded: sigv4.py finds
 * its functions (gateway/_aws/_libcrypto.py, with ctypes) and hands their
 * addresses to bind(). Nothing is linked at build time and nothing here calls
 * the dynamic loader, so the module needs no OpenSSL headers to build, a
 * wheel carries no copy of OpenSSL and keeps its manylinux tag (dlopen would
 * tie it to glibc 2.34), and signing uses the OpenSSL the system updates.
 * Where no such libcrypto is loaded (a Python with OpenSSL linked statically)
 * nothing is bound, and sigv4.py uses hashlib.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../_http/_decimal.h"

#define DIGEST_LENGTH 32
#define HEX_LENGTH (2 * DIGEST_LENGTH)

/* OpenSSL's SHA256_CTX, as its public header declares it: the same in every
 * libcrypto.so.1.1 and libcrypto.so.3 (callers allocate it, so it is ABI). */
typedef struct {
    unsigned int h[8];
    unsigned int Nl, Nh;
    unsigned int data[16];
    unsigned int num, md_len;
} sha256_context;

#define STATES_LENGTH (3 * sizeof(sha256_context))

/* SHA256_Init, SHA256_Update, SHA256_Final and OPENSSL_cleanse (deprecated in
 * OpenSSL 3 in favour of EVP, whose context copies are the cost avoided here). */
static int (*sha256_init)(sha256_context *);
static int (*sha256_update)(sha256_context *, const void *, size_t);
static int (*sha256_final)(unsigned char *, sha256_context *);
static void (*cleanse)(void *, size_t);

static const char HEX_DIGITS[] = "0123456789abcdef";

static void
to_hex(const unsigned char *digest, char *out)
{
    for (int i = 0; i < DIGEST_LENGTH; i++) {
        out[2 * i] = HEX_DIGITS[digest[i] >> 4];
        out[2 * i + 1] = HEX_DIGITS[digest[i] & 15];
    }
}

static int
bound(void)
{
    if (sha256_init == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the signing tail is not bound to a libcrypto");
        return 0;
    }
    return 1;
}

/* A new state that has hashed a buffer's bytes; -1 with an error set if it has none. */
static int
hash_into(PyObject *data, sha256_context *context)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    sha256_init(context);
    sha256_update(context, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return 0;
}

/* The hex SHA-256 of a buffer, into out. */
static int
hex_of(PyObject *data, char *out)
{
    sha256_context context;
    if (hash_into(data, &context) < 0) {
        return -1;
    }
    unsigned char digest[DIGEST_LENGTH];
    sha256_final(digest, &context);
    to_hex(digest, out);
    return 0;
}

PyDoc_STRVAR(sha256_hex_doc,
             "sha256_hex($module, data, /)\n--\n\n"
             "The SHA-256 of ``data`` (a bytes-like object) in lower-case hex.");

static PyObject *
sha256_hex(PyObject *module, PyObject *data)
{
    char hex[HEX_LENGTH];
    if (!bound() || hex_of(data, hex) < 0) {
        return NULL;
    }
    return PyUnicode_FromStringAndSize(hex, HEX_LENGTH);
}

PyDoc_STRVAR(sha256_state_doc,
             "sha256_state($module, data, /)\n--\n\n"
             "A SHA-256 state that has hashed ``data``, as opaque bytes for signed_head.");

static PyObject *
sha256_state(PyObject *module, PyObject *data)
{
    sha256_context context;
    if (!bound() || hash_into(data, &context) < 0) {
        return NULL;
    }
    PyObject *state = PyBytes_FromStringAndSize((const char *)&context, sizeof context);
    cleanse(&context, sizeof context);
    return state;
}

PyDoc_STRVAR(signed_head_doc,
             "signed_head($module, start, states, payload_hash, body_length, /)\n--\n\n"
             "``start``, the request's signature in hex, then its content-length line and\n"
             "the blank line. ``states`` joins three sha256_state results: the canonical\n"
             "request up to its payload hash, and the HMAC's inner (key pad and string to\n"
             "sign up to the request's hash) and outer (key pad) states. ``payload_hash``\n"
             "is the body's hex SHA-256.");

static PyObject *
signed_head(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "signed_head takes 4 arguments");
        return NULL;
    }
    if (!bound()) {
        return NULL;
    }
    PyObject *start = args[0], *states = args[1], *payload_hash = args[2];
    if (!PyBytes_Check(start) || !PyBytes_Check(states) || !PyUnicode_Check(payload_hash)) {
        PyErr_SetString(PyExc_TypeError, "signed_head takes (bytes, bytes, str, int)");
        return NULL;
    }
    if ((size_t)PyBytes_GET_SIZE(states) != STATES_LENGTH) {
        PyErr_SetString(PyExc_ValueError, "states must join three sha256_state results");
        return NULL;
    }
    Py_ssize_t hash_length;
    const char *hash = PyUnicode_AsUTF8AndSize(payload_hash, &hash_length);
    if (hash == NULL) {
        return NULL;
    }
    Py_ssize_t body_length = PyLong_AsSsize_t(args[3]);
    if (body_length == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (body_length < 0) {
        PyErr_SetString(PyExc_ValueError, "body_length must not be negative");
        return NULL;
    }
    const sha256_context *presigned = (const sha256_context *)PyBytes_AS_STRING(states);
    unsigned char digest[DIGEST_LENGTH];
    char hex[HEX_LENGTH];
    sha256_context context;

    /* The canonical request, finished with the payload's hash. */
    memcpy(&context, &presigned[0], sizeof context);
    sha256_update(&context, hash, (size_t)hash_length);
    sha256_final(digest, &context);
    to_hex(digest, hex);
    /* HMAC: the string to sign ends with the canonical request's hash. */
    memcpy(&context, &presigned[1], sizeof context);
    sha256_update(&context, hex, HEX_LENGTH);
    sha256_final(digest, &context);
    memcpy(&context, &presigned[2], sizeof context);
    sha256_update(&context, digest, DIGEST_LENGTH);
    sha256_final(digest, &context);
    cleanse(&context, sizeof context);
    to_hex(digest, hex);

    static const char length_name[] = "\r\ncontent-length: ";
    char digits[DECIMAL_MAX];
    const char *first = decimal_digits((size_t)body_length, digits + sizeof digits);
    Py_ssize_t digit_count = (digits + sizeof digits) - first;
    Py_ssize_t start_length = PyBytes_GET_SIZE(start);
    Py_ssize_t size = start_length + HEX_LENGTH + (Py_ssize_t)(sizeof length_name - 1)
                      + digit_count + 4;
    PyObject *head = PyBytes_FromStringAndSize(NULL, size);
    if (head == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(head);
    memcpy(out, PyBytes_AS_STRING(start), (size_t)start_length);
    out += start_length;
    memcpy(out, hex, HEX_LENGTH);
    out += HEX_LENGTH;
    memcpy(out, length_name, sizeof length_name - 1);
    out += sizeof length_name - 1;
    memcpy(out, first, (size_t)digit_count);
    memcpy(out + digit_count, "\r\n\r\n", 4);
    return head;
}

/* SHA-256("abc") (FIPS 180-2's first example): the functions found do what they say. */
static int
self_test(void)
{
    static const char expected[] =
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    PyObject *abc = PyBytes_FromStringAndSize("abc", 3);
    if (abc == NULL) {
        return -1;
    }
    char hex[HEX_LENGTH];
    int failed = hex_of(abc, hex);
    Py_DECREF(abc);
    if (failed || memcmp(hex, expected, HEX_LENGTH) != 0) {
        PyErr_SetString(PyExc_ImportError, "libcrypto's SHA-256 failed its self-test");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(bind_doc,
             "bind($module, init, update, final, cleanse, /)\n--\n\n"
             "Use the libcrypto functions at these addresses: SHA256_Init, SHA256_Update,\n"
             "SHA256_Final and OPENSSL_cleanse of the libcrypto Python's _hashlib loaded\n"
             "(gateway._aws._libcrypto finds them). They must be those functions: they are\n"
             "called as such. SHA-256(\"abc\") is checked before they are kept; on a\n"
             "mismatch ImportError is raised and nothing is kept.");

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind takes 4 addresses");
        return NULL;
    }
    void *addresses[4];
    for (int i = 0; i < 4; i++) {
        if (!PyLong_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "bind takes 4 addresses (int)");
            return NULL;
        }
        addresses[i] = PyLong_AsVoidPtr(args[i]);
        if (addresses[i] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "a null address");
            }
            return NULL;
        }
    }
    *(void **)&sha256_init = addresses[0];
    *(void **)&sha256_update = addresses[1];
    *(void **)&sha256_final = addresses[2];
    *(void **)&cleanse = addresses[3];
    if (self_test() < 0) {
        sha256_init = NULL;
        sha256_update = NULL;
        sha256_final = NULL;
        cleanse = NULL;
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"sha256_hex", (PyCFunction)sha256_hex, METH_O, sha256_hex_doc},
    {"sha256_state", (PyCFunction)sha256_state, METH_O, sha256_state_doc},
    {"signed_head", (PyCFunction)(void (*)(void))signed_head, METH_FASTCALL, signed_head_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "gateway._aws._sigv4_tail",
    "The per-request tail of SigV4 signing on OpenSSL's SHA-256 (see sigv4.py).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__sigv4_tail(void)
{
    return PyModule_Create(&module);
}

/* Scans of a received answer, each a single pass in C where compiled Python
 * (or llhttp's callbacks) would make several generic calls: whether a read is
 * exactly one plain answer (plain_answer, below), where a head ends (head_end),
 * and which of its field lines a relay copies into its own answer
 * (field_lines). gateway/_http/connection.py and gateway/_invoke/api.py use
 * them where this module was built; elsewhere llhttp and their Python versions
 * do the same, with the same result for every input (tests compare the two).
 *
 * head_end(data, start): where the head that starts at `start` ends, as
 * `data.find(b"\r\n\r\n", start)`, else `data.find(b"\n\n", start)` (a server
 * ending its lines with bare LF), else -1. bytes.find costs a method call and
 * its search's set-up, about 2,000 instructions on a 150-byte head; a few
 * memchr calls a tenth of that.
 *
 * field_lines(head): the field lines of a received head that the sidecar copies
 * into its answer to a relayed call (the request id, the variant, the content
 * type...), rather than decoding each field and encoding it again.
 * InvokeResult.field_lines, whose Python version costs about 2,500 instructions
 * a line (a slice, a dict look-up of a new bytes object, an append). api.py binds
 * the field names once (bind_fields). The rules, the Python version's:
 *
 * - no CR, LF or NUL in the head but its CRLF pairs (a bare CR or LF could be
 *   split into lines differently by whoever reads the copy);
 * - each line after the status line is a field named up to its first colon (the
 *   whole line if it has none); a line whose name is one of the bound names,
 *   compared as ASCII case-insensitively, is kept, others are dropped;
 * - no kept field twice (reading the fields keeps the last one);
 * - an empty line, or one that starts with a space or a tab (a folded field),
 *   refuses the head unless its name is bound;
 * - the required field (the request id) must be there, with a value that is not
 *   all whitespace.
 *
 * The result is the kept lines, each ending in CRLF, in the order received; or
 * None where any rule refuses the head.
 *
 * unread(fd): whether bytes nobody read yet (or the peer's close, or an error) wait
 * on the socket `fd`, the check a pooled socket gets before each reuse: one poll(2)
 * with a zero timeout. select.poll makes the same call, but releases and takes back
 * the GIL around it (two mutex operations and a condition variable, for a call that
 * cannot block) and builds a list of tuples for its answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#ifndef _WIN32
#include <poll.h>
#endif

#include "_plain_syntax.h"

/* A field's bit in a 64-bit set: at most 64 names. */
#define MAX_NAMES 64
/* The longest name bound; SageMaker's longest is 44 bytes. */
#define MAX_NAME_LENGTH 128

static char names[MAX_NAMES][MAX_NAME_LENGTH];
static Py_ssize_t name_lengths[MAX_NAMES];
static int name_count = -1; /* -1: not bound */
static int required = 0;

/* The index of the bound name `name` is (ASCII case-insensitively), or -1. */
static int
name_index(const unsigned char *name, Py_ssize_t length)
{
    for (int i = 0; i < name_count; i++) {
        if (name_lengths[i] != length) {
            continue;
        }
        const unsigned char *bound_name = (const unsigned char *)names[i];
        Py_ssize_t k = 0;
        while (k < length && ascii_lower(name[k]) == bound_name[k]) {
            k++;
        }
        if (k == length) {
            return i;
        }
    }
    return -1;
}

/* bytes.strip()'s whitespace (Py_ISSPACE): space, \t, \n, \v, \f, \r. */
static int
all_whitespace(const unsigned char *value, Py_ssize_t length)
{
    for (Py_ssize_t k = 0; k < length; k++) {
        unsigned char c = value[k];
        if (!(c == ' ' || (c >= '\t' && c <= '\r'))) {
            return 0;
        }
    }
    return 1;
}

PyDoc_STRVAR(bind_fields_doc,
"bind_fields(names, required, /)\n--\n\n"
"Bind the field names whose lines are kept (a tuple of at most 64 lower-case\n"
"bytes) and the index of the one a head must hold.");

static PyObject *
bind_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind_fields() takes a tuple of names and an index");
        return NULL;
    }
    PyObject *given = args[0];
    Py_ssize_t count = PyTuple_GET_SIZE(given);
    long index = PyLong_AsLong(args[1]);
    if (index == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (count < 1 || count > MAX_NAMES || index < 0 || index >= count) {
        PyErr_SetString(PyExc_ValueError, "bind_fields() takes 1 to 64 names and an index among them");
        return NULL;
    }
    /* Checked whole before anything is kept: a refused bind leaves the last one. */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(given, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "bind_fields() takes names as bytes");
            return NULL;
        }
        Py_ssize_t length = PyBytes_GET_SIZE(name);
        const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(name);
        if (length < 1 || length > MAX_NAME_LENGTH) {
            PyErr_SetString(PyExc_ValueError, "bind_fields() takes names of 1 to 128 bytes");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < length; k++) {
            if (text[k] == ':' || text[k] <= ' ' || text[k] >= 127 || ascii_lower(text[k]) != text[k]) {
                PyErr_SetString(PyExc_ValueError, "bind_fields() takes lower-case field names");
                return NULL;
            }
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(given, i);
        name_lengths[i] = PyBytes_GET_SIZE(name);
        memcpy(names[i], PyBytes_AS_STRING(name), (size_t)name_lengths[i]);
    }
    name_count = (int)count;
    required = (int)index;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(field_lines_doc,
"field_lines(head, /)\n--\n\n"
"The kept field lines of a received head (status line first, without its\n"
"final blank line), each ending in CRLF; None where copying them is refused.");

static PyObject *
field_lines(PyObject *module, PyObject *head)
{
    if (!PyBytes_Check(head)) {
        PyErr_SetString(PyExc_TypeError, "field_lines() takes bytes");
        return NULL;
    }
    if (name_count < 0) {
        PyErr_SetString(PyExc_RuntimeError, "field_lines() before bind_fields()");
        return NULL;
    }
    const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(head);
    Py_ssize_t size = PyBytes_GET_SIZE(head);
    if (memchr(text, '\0', (size_t)size) != NULL) {
        Py_RETURN_NONE;
    }
    Py_ssize_t kept_start[MAX_NAMES];
    Py_ssize_t kept_length[MAX_NAMES];
    int kept = 0;
    unsigned long long seen = 0;
    Py_ssize_t total = 0;
    /* Line by line, each found with memchr (vectorised): a line ends at an LF that a
     * CR in the same line precedes, and holds no other CR. The first is the status line. */
    Py_ssize_t start = 0;
    for (int status_line = 1;; status_line = 0) {
        const unsigned char *line = text + start;
        const unsigned char *newline = memchr(line, '\n', (size_t)(size - start));
        Py_ssize_t length;
        if (newline == NULL) {
            length = size - start;
        }
        else if (newline == line || newline[-1] != '\r') {
            Py_RETURN_NONE; /* a bare LF */
        }
        else {
            length = (newline - line) - 1;
        }
        if (memchr(line, '\r', (size_t)length) != NULL) {
            Py_RETURN_NONE; /* a bare CR */
        }
        int index = -1;
        const unsigned char *colon = NULL;
        if (!status_line) {
            colon = memchr(line, ':', (size_t)length);
            index = name_index(line, colon == NULL ? length : colon - line);
            if (index < 0 && (length == 0 || line[0] == ' ' || line[0] == '\t')) {
                Py_RETURN_NONE; /* an empty line, or a folded field */
            }
        }
        if (index >= 0) {
            unsigned long long bit = 1ULL << index;
            if (seen & bit) {
                Py_RETURN_NONE; /* sent twice: reading keeps the last */
            }
            if (index == required) {
                const unsigned char *value = colon == NULL ? line + length : colon + 1;
                if (all_whitespace(value, (line + length) - value)) {
                    Py_RETURN_NONE;
                }
            }
            seen |= bit;
            kept_start[kept] = start;
            kept_length[kept] = length;
            kept++;
            total += length + 2;
        }
        if (newline == NULL) {
            break;
        }
        start = (newline - text) + 1;
    }
    if (!(seen & (1ULL << required))) {
        Py_RETURN_NONE;
    }
    PyObject *lines = PyBytes_FromStringAndSize(NULL, total);
    if (lines == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(lines);
    for (int i = 0; i < kept; i++) {
        memcpy(out, text + kept_start[i], (size_t)kept_length[i]);
        out += kept_length[i];
        *out++ = '\r';
        *out++ = '\n';
    }
    return lines;
}

/* The first `mark` (CRLF CRLF, or LF LF) in [from, to). memchr (vectorised) finds each
 * candidate's first byte: a head has a few line ends, so a few calls; glibc's memmem
 * hashes its way through the whole head instead, several times the instructions. */
static const char *
blank_line(const char *from, const char *to, const char *mark, size_t length)
{
    while ((size_t)(to - from) >= length) {
        const char *candidate = memchr(from, mark[0], (size_t)(to - from) - length + 1);
        if (candidate == NULL) {
            return NULL;
        }
        if (memcmp(candidate, mark, length) == 0) {
            return candidate;
        }
        from = candidate + 1;
    }
    return NULL;
}

PyDoc_STRVAR(head_end_doc,
"head_end(data, start, /)\n--\n\n"
"Where the head starting at `start` ends: the first CRLF CRLF from there, else\n"
"the first LF LF, else -1 (bytes.find's answers).");

static PyObject *
head_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "head_end() takes bytes and a start");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const char *text = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > size) {
        PyErr_SetString(PyExc_ValueError, "head_end() takes a start within the data");
        return NULL;
    }
    const char *found = blank_line(text + start, text + size, "\r\n\r\n", 4);
    if (found == NULL) {
        found = blank_line(text + start, text + size, "\n\n", 2);
    }
    return PyLong_FromSsize_t(found == NULL ? -1 : found - text);
}

/* plain_answer: a received chunk that is exactly one plain answer, head and body.
 *
 * Nearly every answer a warm keep-alive socket gets is "HTTP/1.1 200", a few
 * ordinary fields, a Content-Length and that many bytes of body, all in one
 * read. llhttp parses it through five Python callbacks; this recognises it in
 * one pass, and only it: a strict subset of what llhttp accepts, read as llhttp
 * reads it (tests check both on generated answers). Anything else (another
 * status, HTTP/1.0, a Connection, Transfer-Encoding or Upgrade field, a second
 * Content-Length, a fold, a byte outside the plain field syntax, a head past
 * the bounds below, a body cut short or followed by more bytes) gets -1, and
 * the caller feeds the chunk to llhttp as before. */

#define PLAIN_HEAD_MAX 8192  /* far below the transport's 64 KiB head limit */
#define PLAIN_FIELDS_MAX 100 /* and its 128 fields */
static const char PLAIN_STATUS[] = "HTTP/1.1 200 ";

/* Where the head of `data` ends (its blank line's CRLF CRLF), if `data` is exactly one
 * plain answer; else -1. */
static Py_ssize_t
plain_head_end(const unsigned char *data, Py_ssize_t size)
{
    const Py_ssize_t status_length = (Py_ssize_t)(sizeof(PLAIN_STATUS) - 1);
    Py_ssize_t limit = size < PLAIN_HEAD_MAX ? size : PLAIN_HEAD_MAX;
    if (limit < status_length || memcmp(data, PLAIN_STATUS, (size_t)status_length) != 0) {
        return -1;
    }
    Py_ssize_t at = status_length;
    while (at < limit && data[at] != '\r') { /* the reason phrase */
        if (!(byte_class[data[at]] & PLAIN_VALUE)) {
            return -1;
        }
        at++;
    }
    if (!blank_line_at(data, at, limit)) {
        return -1; /* the status line's CRLF */
    }
    at += 2;
    long long declared = -1;
    int fields = 0;
    while (!blank_line_at(data, at, limit)) {
        plain_field field;
        if (++fields > PLAIN_FIELDS_MAX || (at = read_plain_field(data, at, limit, &field)) < 0) {
            return -1;
        }
        if (NAMED(field.name, field.name_length, "content-length")) {
            if (declared >= 0) {
                return -1; /* twice: llhttp's to judge */
            }
            declared = length_value(field.value, field.value_end);
            if (declared < 0) {
                return -1;
            }
        }
        else if (framing_field(&field)) {
            return -1;
        }
    }
    Py_ssize_t head_end = at - 2; /* the blank line's CRLF CRLF starts at the last CR */
    Py_ssize_t body_start = at + 2;
    if (declared < 0 || declared != (long long)(size - body_start)) {
        return -1;
    }
    return head_end;
}

PyDoc_STRVAR(plain_answer_doc,
"plain_answer(data, /)\n--\n\n"
"Where the head of `data` ends (its blank line's first byte), if `data` is exactly\n"
"one plain answer: HTTP/1.1 200, plain fields, one Content-Length and that many\n"
"bytes of body. Else -1, and llhttp is to parse it.");

static PyObject *
plain_answer(PyObject *module, PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "plain_answer() takes bytes");
        return NULL;
    }
    const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(data);
    return PyLong_FromSsize_t(plain_head_end(text, PyBytes_GET_SIZE(data)));
}

#ifndef _WIN32
PyDoc_STRVAR(unread_doc,
"unread(fd, /)\n--\n\n"
"Whether the socket `fd` has something to read (bytes, the peer's close, an error):\n"
"poll(2) with a zero timeout. True too where poll fails (a closed descriptor).");

static PyObject *
unread(PyObject *module, PyObject *fd)
{
    long number = PyLong_AsLong(fd);
    if (number == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (number < 0 || number > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "unread() takes a file descriptor");
        return NULL;
    }
    struct pollfd watched = {.fd = (int)number, .events = POLLIN, .revents = 0};
    /* A zero timeout never blocks: the GIL stays held. */
    int ready = poll(&watched, 1, 0);
    return PyBool_FromLong(ready != 0);
}
#endif

static PyMethodDef methods[] = {
#ifndef _WIN32
    {"unread", (PyCFunction)unread, METH_O, unread_doc},
#endif
    {"plain_answer", (PyCFunction)plain_answer, METH_O, plain_answer_doc},
    {"bind_fields", (PyCFunction)(void (*)(void))bind_fields, METH_FASTCALL, bind_fields_doc},
    {"field_lines", (PyCFunction)field_lines, METH_O, field_lines_doc},
    {"head_end", (PyCFunction)(void (*)(void))head_end, METH_FASTCALL, head_end_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "gateway._http._heads",
    "Scans of a received answer head (where it ends, the field lines a relay copies), "
    "and the check of an idle socket.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__heads(void)
{
    classify_bytes();
    return PyModule_Create(&module);
}

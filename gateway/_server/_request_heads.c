/* plain_request: a read that is exactly one plain request, in one pass.
 *
 * Nearly every request a sidecar reads is one POST (or GET) whole in one read:
 * a request line, a few ordinary fields, a Content-Length and that many bytes
 * of body. llhttp parses it through a Python callback per field and five more
 * per message, each handed new bytes objects. This recognises that shape, and
 * only it: a strict subset of what llhttp accepts, read as llhttp reads it
 * (tests check both on generated requests), and builds what the server's
 * reader would (the method, the target, the fields by name, the body: with no
 * field sent twice, their pairs are the dict's items). Anything else gets None,
 * and the reader feeds the bytes to llhttp as before: another method or version, an unusual target byte, a Connection,
 * Transfer-Encoding, Upgrade or Expect field, a field sent twice, a fold, a
 * byte outside visible ASCII, space and tab, a head or field count at the
 * reader's limits, a body over the given size, cut short or followed by more.
 *
 * gateway/_server/parsing.py uses it where it was built and binds the field
 * names clients send on every request (bind_names), whose lower-case strings
 * it then shares rather than makes.
 *
 * copied_answer(status_line, lines, date_line, server_line, body): the answer the
 * server writes for a relay that copied an upstream's field lines
 * (gateway/_server/writing.py): those parts, a Content-Length line, the blank
 * line and the body, in one new bytes object. bytes.join over a tuple and bytes
 * formatting for the length cost about 1,500 instructions; one allocation and a
 * copy of each part a tenth of that.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../_http/_decimal.h"
#include "../_http/_plain_syntax.h"

#define MAX_NAMES 64
/* The longest value or target kept to be shared with the next request. */
#define MAX_KEPT 512

static PyObject *names[MAX_NAMES]; /* lower-case str, shared */
static int name_count = 0;
/* Per bound name: whether its values are kept, and the last one (a str, or NULL). A
 * client sends the same host, content type, length and target request after
 * request: the next request that sends the same bytes shares that str rather than
 * a new copy, whose hash is known, and which compares by identity where it is a key. */
static char keeps_value[MAX_NAMES];
static PyObject *kept_values[MAX_NAMES];
static PyObject *kept_target;
static PyObject *post_method;
static PyObject *get_method;

/* The field name's lower-case str: a bound one, shared (its place in *place), or a
 * new one (*place is -1). */
static PyObject *
lower_name(const unsigned char *name, Py_ssize_t length, int *place)
{
    *place = -1;
    for (int i = 0; i < name_count; i++) {
        if (PyUnicode_GET_LENGTH(names[i]) != length) {
            continue;
        }
        const Py_UCS1 *bound = PyUnicode_1BYTE_DATA(names[i]);
        Py_ssize_t k = 0;
        while (k < length && ascii_lower(name[k]) == bound[k]) {
            k++;
        }
        if (k == length) {
            *place = i;
            return Py_NewRef(names[i]);
        }
    }
    PyObject *lower = PyUnicode_New(length, 127);
    if (lower == NULL) {
        return NULL;
    }
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(lower);
    for (Py_ssize_t k = 0; k < length; k++) {
        out[k] = ascii_lower(name[k]);
    }
    return lower;
}

/* The str of `length` bytes at `text`: `*last` if it holds those bytes, else a new
 * one, which `*last` then holds (when `keep`, and it is short). */
static PyObject *
shared_text(const unsigned char *text, Py_ssize_t length, PyObject **last, int keep)
{
    PyObject *kept = *last;
    if (kept != NULL && PyUnicode_GET_LENGTH(kept) == length
        && memcmp(PyUnicode_1BYTE_DATA(kept), text, (size_t)length) == 0) {
        return Py_NewRef(kept);
    }
    PyObject *made = PyUnicode_DecodeLatin1((const char *)text, length, NULL);
    if (made != NULL && keep && length <= MAX_KEPT) {
        Py_XSETREF(*last, Py_NewRef(made));
    }
    return made;
}

static void
forget_kept(void)
{
    for (int i = 0; i < MAX_NAMES; i++) {
        keeps_value[i] = 0;
        Py_CLEAR(kept_values[i]);
    }
    Py_CLEAR(kept_target);
}

PyDoc_STRVAR(bind_names_doc,
"bind_names(names, kept=(), /)\n--\n\n"
"Bind the lower-case field names (a tuple of at most 64 ASCII str) whose\n"
"strings are shared rather than made for each request; and, of those, the ones\n"
"whose last value is kept, to be shared by the next request that sends it.");

static PyObject *
bind_names(PyObject *module, PyObject *args)
{
    PyObject *given;
    PyObject *kept = NULL;
    if (!PyArg_ParseTuple(args, "O|O:bind_names", &given, &kept)) {
        return NULL;
    }
    if (!PyTuple_Check(given) || (kept != NULL && !PyTuple_Check(kept))) {
        PyErr_SetString(PyExc_TypeError, "bind_names() takes tuples of str");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(given);
    if (count > MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "bind_names() takes at most 64 names");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(given, i);
        if (!PyUnicode_Check(name) || !PyUnicode_IS_ASCII(name) || PyUnicode_GET_LENGTH(name) == 0) {
            PyErr_SetString(PyExc_TypeError, "bind_names() takes non-empty ASCII str");
            return NULL;
        }
        const Py_UCS1 *text = PyUnicode_1BYTE_DATA(name);
        for (Py_ssize_t k = 0; k < PyUnicode_GET_LENGTH(name); k++) {
            if (!(byte_class[text[k]] & TCHAR) || ascii_lower(text[k]) != text[k]) {
                PyErr_SetString(PyExc_ValueError, "bind_names() takes lower-case field names");
                return NULL;
            }
        }
    }
    char keeps[MAX_NAMES] = {0};
    Py_ssize_t kept_count = kept == NULL ? 0 : PyTuple_GET_SIZE(kept);
    for (Py_ssize_t j = 0; j < kept_count; j++) {
        PyObject *name = PyTuple_GET_ITEM(kept, j);
        Py_ssize_t i = 0;
        while (i < count && (!PyUnicode_Check(name)
                             || PyUnicode_Compare(name, PyTuple_GET_ITEM(given, i)) != 0)) {
            i++;
        }
        if (i == count) {
            PyErr_SetString(PyExc_ValueError, "bind_names() keeps values of bound names only");
            return NULL;
        }
        keeps[i] = 1;
    }
    forget_kept();
    for (int i = 0; i < name_count; i++) {
        Py_CLEAR(names[i]);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        names[i] = Py_NewRef(PyTuple_GET_ITEM(given, i));
        keeps_value[i] = keeps[i];
    }
    name_count = (int)count;
    Py_RETURN_NONE;
}

/* Reads the fields of a head from `at` (just after the request line) into headers;
 * where the head's blank line ends, or -1 (not plain). Sets *declared. */
static Py_ssize_t
read_fields(const unsigned char *data, Py_ssize_t at, Py_ssize_t limit, long max_fields,
            PyObject *headers, long long *declared)
{
    long fields = 0;
    *declared = 0;
    for (;;) {
        if (blank_line_at(data, at, limit)) {
            return at + 2;
        }
        plain_field field;
        if (++fields >= max_fields) {
            return -1; /* at the reader's limit: llhttp's, and its 431 */
        }
        if ((at = read_plain_field(data, at, limit, &field)) < 0) {
            return -1;
        }
        if (NAMED(field.name, field.name_length, "content-length")) {
            *declared = length_value(field.value, field.value_end);
            if (*declared < 0) {
                return -1;
            }
        }
        else if (framing_field(&field) || NAMED(field.name, field.name_length, "expect")) {
            return -1; /* framing, the connection's fate, or an interim answer: llhttp's */
        }
        int bound;
        PyObject *lower = lower_name(field.name, field.name_length, &bound);
        PyObject *text = NULL;
        if (lower != NULL) {
            Py_ssize_t length = field.value_end - field.value;
            text = bound < 0 ? PyUnicode_DecodeLatin1((const char *)field.value, length, NULL)
                             : shared_text(field.value, length, &kept_values[bound],
                                           keeps_value[bound]);
        }
        /* One look-up: a name there already leaves the dict's size as it was (the value
         * returned cannot tell: equal short strings can be one cached object). */
        Py_ssize_t before = PyDict_GET_SIZE(headers);
        PyObject *kept = text == NULL ? NULL : PyDict_SetDefault(headers, lower, text);
        Py_XDECREF(text);
        Py_XDECREF(lower);
        if (kept == NULL) {
            return -2;
        }
        if (PyDict_GET_SIZE(headers) == before) {
            return -1; /* the reader joins the values: llhttp's path */
        }
    }
}

PyDoc_STRVAR(plain_request_doc,
"plain_request(data, max_head, max_fields, max_body, /)\n--\n\n"
"(method, target, headers, body) if `data` is exactly one plain request\n"
"whose head is shorter than max_head bytes, with fewer than max_fields fields and\n"
"a body of at most max_body bytes; else None, and llhttp is to parse it.");

static PyObject *
plain_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "plain_request() takes bytes and three limits");
        return NULL;
    }
    Py_ssize_t max_head = PyLong_AsSsize_t(args[1]);
    long max_fields = PyLong_AsLong(args[2]);
    long long max_body = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t limit = size < max_head ? size : max_head - 1;
    PyObject *method;
    Py_ssize_t at;
    if (limit > 5 && memcmp(data, "POST /", 6) == 0) {
        method = post_method;
        at = 5;
    }
    else if (limit > 4 && memcmp(data, "GET /", 5) == 0) {
        method = get_method;
        at = 4;
    }
    else {
        Py_RETURN_NONE;
    }
    const unsigned char *target = data + at;
    while (at < limit && (byte_class[data[at]] & TARGET)) {
        at++;
    }
    Py_ssize_t target_length = (data + at) - target;
    static const char version[] = " HTTP/1.1\r\n";
    if (limit - at < (Py_ssize_t)(sizeof(version) - 1)
        || memcmp(data + at, version, sizeof(version) - 1) != 0) {
        Py_RETURN_NONE;
    }
    at += (Py_ssize_t)(sizeof(version) - 1);
    PyObject *headers = PyDict_New();
    PyObject *result = NULL;
    if (headers == NULL) {
        goto done;
    }
    long long declared;
    Py_ssize_t body_start = read_fields(data, at, limit, max_fields, headers, &declared);
    if (body_start == -2) {
        goto done;
    }
    if (body_start < 0 || declared > max_body || declared != (long long)(size - body_start)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *target_text = shared_text(target, target_length, &kept_target, 1);
    PyObject *body = PyBytes_FromStringAndSize((const char *)data + body_start, size - body_start);
    if (target_text != NULL && body != NULL) {
        result = PyTuple_Pack(4, method, target_text, headers, body);
    }
    Py_XDECREF(target_text);
    Py_XDECREF(body);
done:
    Py_XDECREF(headers);
    return result;
}

PyDoc_STRVAR(copied_answer_doc,
"copied_answer(status_line, lines, date_line, server_line, body, /)\n--\n\n"
"status_line + lines + date_line + server_line + b\"content-length: N\\r\\n\\r\\n\"\n"
"+ body, N being len(body): five bytes objects in, one out.");

static PyObject *
copied_answer(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "copied_answer() takes five bytes objects");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 5; i++) {
        if (!PyBytes_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "copied_answer() takes five bytes objects");
            return NULL;
        }
    }
    static const char length_name[] = "content-length: ";
    Py_ssize_t body_size = PyBytes_GET_SIZE(args[4]);
    char digits[DECIMAL_MAX];
    const char *first = decimal_digits((size_t)body_size, digits + sizeof(digits));
    Py_ssize_t digit_count = (digits + sizeof(digits)) - first;
    Py_ssize_t size = (Py_ssize_t)(sizeof(length_name) - 1) + digit_count + 4;
    for (Py_ssize_t i = 0; i < 5; i++) {
        size += PyBytes_GET_SIZE(args[i]);
    }
    PyObject *answer = PyBytes_FromStringAndSize(NULL, size);
    if (answer == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(answer);
    for (Py_ssize_t i = 0; i < 4; i++) {
        memcpy(out, PyBytes_AS_STRING(args[i]), (size_t)PyBytes_GET_SIZE(args[i]));
        out += PyBytes_GET_SIZE(args[i]);
    }
    memcpy(out, length_name, sizeof(length_name) - 1);
    out += sizeof(length_name) - 1;
    memcpy(out, first, (size_t)digit_count);
    out += digit_count;
    memcpy(out, "\r\n\r\n", 4);
    out += 4;
    memcpy(out, PyBytes_AS_STRING(args[4]), (size_t)body_size);
    return answer;
}

static PyMethodDef methods[] = {
    {"bind_names", (PyCFunction)bind_names, METH_VARARGS, bind_names_doc},
    {"plain_request", (PyCFunction)(void (*)(void))plain_request, METH_FASTCALL,
     plain_request_doc},
    {"copied_answer", (PyCFunction)(void (*)(void))copied_answer, METH_FASTCALL,
     copied_answer_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "gateway._server._request_heads",
    "A read that is exactly one plain request, in one pass (see parsing.py); and the "
    "answer to a relayed one, in one copy (see writing.py).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__request_heads(void)
{
    classify_bytes();
    post_method = PyUnicode_InternFromString("POST");
    get_method = PyUnicode_InternFromString("GET");
    if (post_method == NULL || get_method == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}

/* The plain HTTP/1.1 syntax the two fast paths accept: plain_answer (_heads.c)
 * and plain_request (gateway/_server/_request_heads.c). A strict subset of what
 * llhttp accepts, read as llhttp reads it; anything else is left to llhttp.
 * Included by both (static functions: each module has its own copy).
 */
#ifndef GATEWAY_PLAIN_SYNTAX_H
#define GATEWAY_PLAIN_SYNTAX_H

#include <Python.h>
#include <string.h>

#define LENGTH_DIGITS_MAX 18

/* Each byte's classes, looked up rather than tested: a head is scanned a byte at a time. */
#define TCHAR 1       /* RFC 9110's tchar: what a field name is made of */
#define PLAIN_VALUE 2 /* a field value's byte in the plain syntax: visible ASCII, space, tab */
#define TARGET 4      /* a request target's byte: RFC 3986's unreserved, sub-delims, ":@/?%" */
static unsigned char byte_class[256];

/* Fills byte_class: call once, as the module initialises. */
static void
classify_bytes(void)
{
    for (int c = 0; c < 256; c++) {
        unsigned char class = 0;
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (alnum || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL)) {
            class |= TCHAR;
        }
        if (c == '\t' || (c >= ' ' && c <= '~')) {
            class |= PLAIN_VALUE;
        }
        if (alnum || (c != 0 && strchr("-._~!$&'()*+,;=:@/?%", c) != NULL)) {
            class |= TARGET;
        }
        byte_class[c] = class;
    }
}

static unsigned char
ascii_lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* Whether the field name is `lower` (a lower-case literal), ASCII case-insensitively. */
static int
named(const unsigned char *name, Py_ssize_t length, const char *lower, Py_ssize_t lower_length)
{
    if (length != lower_length) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < length; k++) {
        if (ascii_lower(name[k]) != (unsigned char)lower[k]) {
            return 0;
        }
    }
    return 1;
}

#define NAMED(name, length, literal) named(name, length, literal, (Py_ssize_t)sizeof(literal) - 1)

/* A field line: its name, and its value without the leading blanks llhttp drops
 * (the trailing ones it keeps). */
typedef struct {
    const unsigned char *name;
    Py_ssize_t name_length;
    const unsigned char *value;
    const unsigned char *value_end;
} plain_field;

/* Reads the field line at `at`: a tchar name, a colon, a plain value, CRLF. Where the
 * next line starts, or -1 if this one is not plain (or runs past `limit`). */
static Py_ssize_t
read_plain_field(const unsigned char *data, Py_ssize_t at, Py_ssize_t limit, plain_field *field)
{
    field->name = data + at;
    while (at < limit && (byte_class[data[at]] & TCHAR)) {
        at++;
    }
    field->name_length = (data + at) - field->name;
    if (field->name_length == 0 || at >= limit || data[at] != ':') {
        return -1;
    }
    at++;
    while (at < limit && (data[at] == ' ' || data[at] == '\t')) {
        at++;
    }
    field->value = data + at;
    while (at < limit && (byte_class[data[at]] & PLAIN_VALUE)) {
        at++;
    }
    field->value_end = data + at;
    if (at + 1 >= limit || data[at] != '\r' || data[at + 1] != '\n') {
        return -1;
    }
    return at + 2;
}

/* Whether a blank line (CRLF) starts at `at`. */
static int
blank_line_at(const unsigned char *data, Py_ssize_t at, Py_ssize_t limit)
{
    return at + 1 < limit && data[at] == '\r' && data[at + 1] == '\n';
}

/* A field whose meaning is framing or the connection's fate: llhttp's to read. */
static int
framing_field(const plain_field *field)
{
    return NAMED(field->name, field->name_length, "transfer-encoding")
           || NAMED(field->name, field->name_length, "connection")
           || NAMED(field->name, field->name_length, "upgrade");
}

/* A Content-Length value (after its leading blanks): digits, then blanks, at most 18
 * digits; or -1. */
static long long
length_value(const unsigned char *value, const unsigned char *end)
{
    while (end > value && (end[-1] == ' ' || end[-1] == '\t')) {
        end--;
    }
    if (value == end || end - value > LENGTH_DIGITS_MAX) {
        return -1;
    }
    long long length = 0;
    for (; value < end; value++) {
        if (*value < '0' || *value > '9') {
            return -1;
        }
        length = length * 10 + (*value - '0');
    }
    return length;
}

#endif

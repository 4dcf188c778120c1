/* A non-negative length in decimal, for the Content-Length lines the C helpers write.
 *
 * snprintf("%zd") costs several hundred instructions a call (its format parsing);
 * this writes the digits from the end of a buffer the caller gives, at least
 * DECIMAL_MAX bytes long, and returns where they start.
 */
#ifndef GATEWAY_DECIMAL_H
#define GATEWAY_DECIMAL_H

#include <stddef.h>

#define DECIMAL_MAX 20 /* the digits of SIZE_MAX on a 64-bit host */

static inline char *
decimal_digits(size_t value, char *end)
{
    char *first = end;
    do {
        *--first = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    return first;
}

#endif

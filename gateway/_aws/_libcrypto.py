"""The SHA-256 functions of the libcrypto Python's own ``_hashlib`` has loaded.

The signing tail (``_sigv4_tail.c``) hashes with them; it is handed their
addresses rather than finding them itself, so that it calls no dynamic-loader
function (``dlopen`` would tie a wheel to glibc 2.34 and newer).
"""

from __future__ import annotations

import ctypes
import os

# The sonames of the OpenSSL releases that export these (1.1 and 3.x), newest first.
_SONAMES = ("libcrypto.so.3", "libcrypto.so.1.1")
_FUNCTIONS = ("SHA256_Init", "SHA256_Update", "SHA256_Final", "OPENSSL_cleanse")


def sha256_functions() -> tuple[int, int, int, int] | None:
    """SHA256_Init, SHA256_Update, SHA256_Final and OPENSSL_cleanse, as addresses.

    None where ``_hashlib`` loaded no shared libcrypto (OpenSSL linked into
    Python statically, or no ``_hashlib``), or it lacks one of them.
    """
    try:
        import _hashlib  # noqa: F401  (loads its libcrypto, if it has one)
    except ImportError:
        return None
    for soname in _SONAMES:
        try:
            # RTLD_NOLOAD: only a libcrypto already loaded, never another copy.
            library = ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            pointers = [ctypes.cast(getattr(library, name), ctypes.c_void_p) for name in _FUNCTIONS]
        except (OSError, AttributeError):
            continue
        addresses = [pointer.value for pointer in pointers]
        if all(addresses):
            init, update, final, cleanse = (int(address or 0) for address in addresses)
            return init, update, final, cleanse
    return None

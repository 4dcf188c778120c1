"""``bench.instructions``' reading of callgrind_annotate's self costs, on fixed text."""

from __future__ import annotations

from bench.instructions import self_cost_by_library

_ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
24,489,996 ( 7.63%)  ???:0x000000000029ad80 [/usr/lib/libcrypto.so.3]
10,449,417 ( 3.26%)  /py/Objects/dictobject.c:_Py_dict_lookup [/usr/lib/libpython3.11.so.1.0]
 9,806,444 ( 3.06%)  /py/Objects/obmalloc.c:_PyObject_Free [/usr/lib/libpython3.11.so.1.0]
 1,076,000 ( 0.34%)  /build/__native_pipeline.c:CPyDef_pipeline___invoke_gen [/x/hot.so]
 2,311,000 ( 0.72%)  /include/python3.11/object.h:CPyDef_sigv4___PresignedHead___head
 1,442,835 ( 0.45%)  /py/./Include/internal/pycore_object.h:PyObject_GC_UnTrack
   903,000 ( 0.28%)  ./string/../sysdeps/x86_64/multiarch/memmove.S:__memcpy_avx_unaligned
320,989,713 (100.0%)  PROGRAM TOTALS
"""


def test_self_costs_are_summed_by_object_largest_first() -> None:
    assert self_cost_by_library(_ANNOTATED) == [
        ("libcrypto.so.3", 24_489_996),
        ("libpython3.11.so.1.0", 20_255_861),
        ("the compiled hot path (inlined)", 2_311_000),
        ("libpython (inlined)", 1_442_835),
        ("hot.so", 1_076_000),
        ("(inlined, no object named)", 903_000),
    ]

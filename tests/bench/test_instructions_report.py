"""``bench.instructions``' reading of callgrind_annotate's self costs, on fixed text."""

from __future__ import annotations

from bench.instructions import parts_of, self_cost_by_library

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


_INCLUSIVE = """\
--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
1,000,000 (100.0%)  p.c:CPyDef_parsing___RequestReader___data_received [/x/hot.so]
  700,000 (70.00%)  /build/__native__app.c:CPyDef__app___RelayLane___take [/x/hot.so]
  250,000 (25.00%)  s.c:CPyDef_sigv4___PresignedHead___head [/x/hot.so]
   50,000 ( 5.00%)  s.c:CPyDef_sigv4___payload_sha256 [/x/hot.so]
   50,000 ( 5.00%)  /build/__native__app.c:CPyDef__app___SidecarApp____members [/x/hot.so]
   20,000 ( 2.00%)  /build/__native__route.c:CPyDef__route___Route___pick [/x/hot.so]
   10,000 ( 1.00%)  /build/__native_deadlines.c:CPyDef_deadlines___DeadlineWheel___arm [/x/hot.so]
  400,000 (40.00%)  c.c:CPyDef_connection___Connection___data_received [/x/hot.so]
  350,000 (35.00%)  /build/__native__app.c:CPyDef__app____Relayed_____call__ [/x/hot.so]
  150,000 (15.00%)  /build/__native__app.c:CPyDef__app____relayed_response [/x/hot.so]
   40,000 ( 4.00%)  /build/__native__metrics.c:CPyDef__metrics___SidecarMetrics___record [/x/hot.so]
"""


def test_parts_nested_in_the_relay_lane_are_counted_once() -> None:
    parts = parts_of(_INCLUSIVE, 1000)
    assert parts["request parsing (HTTP server)"] == 300  # 1,000,000 less the lane's take
    assert parts["relay lane: the call started and sent (its other steps)"] == 320
    assert parts["signing (SigV4, with the payload hash)"] == 300
    assert parts["upstream answer parsing"] == 50
    assert parts["relay lane: the answer (its other steps)"] == 160
    assert parts["answer fields relayed"] == 150
    assert parts["metrics (sidecar's and the gateway's hook)"] == 40
    # Disjoint: together they are the two callbacks' inclusive costs.
    assert sum(parts.values()) == (1_000_000 + 400_000) / 1000


def test_without_the_relay_lane_its_parts_are_nothing() -> None:
    handler_only = "\n".join(line for line in _INCLUSIVE.splitlines() if "RelayLane" not in line)
    handler_only = handler_only.replace("_Relayed_____call__", "_invocation")
    parts = parts_of(handler_only, 1000)
    assert parts["relay lane: the call started and sent (its other steps)"] == 0
    assert parts["relay lane: the answer (its other steps)"] == 0
    assert parts["request parsing (HTTP server)"] == 1000
    assert parts["upstream answer parsing"] == 400

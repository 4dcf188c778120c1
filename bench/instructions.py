"""CPU instructions per call under callgrind: a figure the machine's load does not move.

    python -m bench.instructions                         # the sidecar, this checkout
    python -m bench.instructions --tree /tmp/ab/base     # the sidecar of another checkout
    python -m bench.instructions --library --metrics     # Gateway.invoke, with the metrics hook
    python -m bench.instructions --concurrency 8 --requests 4000
    python -m bench.instructions --concurrency 32 --attribute   # per feature (compiled build)
    python -m bench.instructions --config-json '{"sidecar": {"access_log": true}}'
    python -m bench.instructions --concurrency 32 --sdk-headers   # requests shaped as boto3's

Wall-clock CPU per request on a shared 2-core machine moves by 10% from
one run to the next; the number of instructions a fixed number of calls
runs does not (two runs of one build agree within 0.1%). It counts user
space only: a syscall costs what the kernel spends on it and counts here
as the few instructions around it, so compare syscalls with ``strace -c``.

Sidecar: the stub (``bench._stub``) and the load generator run natively;
the sidecar (``python -m gateway sidecar`` of ``--tree``) runs under
``valgrind --tool=callgrind`` with instrumentation off, is warmed up, and
is instrumented for exactly ``--requests`` requests. Library: a script
making sequential ``Gateway.invoke`` calls runs under callgrind twice,
with N and 3N calls; the difference over 2N is the cost of one call.
Needs valgrind (``apt-get install -y valgrind``).

``--config-json`` merges a JSON object into the sidecar's config (a feature
switched on costs the difference it makes). ``--attribute`` reads the
profile back (``callgrind_annotate``) and prints the instructions per
request spent inside each feature's functions, inclusive of what they call
(the compiled build only, where each function has a name of its own: plain
Python runs them all inside the interpreter's eval loop); then the
instructions per request in each library's own code (the interpreter's
object runtime, hashing, the compiled hot path, the parser, the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httptools

from bench._stub import StubServer
from bench.sidecar_load import build_request, sidecar_config

_WARM_UP = 300
_LIBRARY_SCRIPT = """
import sys
import uvloop
from gateway import Gateway
async def main(url, calls, metrics):
    async with Gateway(region="us-east-1", endpoint_url=url, credentials=("AK", "SK")) as gw:
        if metrics:
            gw.enable_metrics()
        for _ in range(200 + calls):
            await gw.invoke("bench-model", b'{"x": 1}', content_type="application/json")
uvloop.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"))
"""


class _Client(asyncio.Protocol):
    """One keep-alive connection sending requests while the shared budget lasts.

    ``held``: the connection waits for ``send()`` to start and stays open when the
    budget runs out (a count taken over connections opened beforehand).
    """

    def __init__(
        self, request: bytes, budget: list[int], done: asyncio.Future[None], held: bool = False
    ) -> None:
        self._request = request
        self._budget = budget
        self._done = done
        self._held = held
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self.errors = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if not self._held:
            self.send()

    def send(self) -> None:
        assert self._transport is not None
        if self._budget[0] <= 0:
            if not self._held:
                self._transport.close()
            if not self._done.done():
                self._done.set_result(None)
            return
        self._budget[0] -= 1
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() != 200:
            self.errors += 1
        self.send()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def _drive(port: int, requests: int, concurrency: int, sdk_headers: bool = False) -> int:
    """Send ``requests`` requests over ``concurrency`` connections; the number that failed."""
    loop = asyncio.get_running_loop()
    request = build_request(f"127.0.0.1:{port}", sdk_headers)
    budget = [requests]
    clients: list[tuple[_Client, asyncio.Future[None]]] = []
    for _ in range(concurrency):
        done: asyncio.Future[None] = loop.create_future()
        factory = functools.partial(_Client, request, budget, done)
        _, client = await loop.create_connection(factory, "127.0.0.1", port)
        clients.append((client, done))
    await asyncio.gather(*(done for _, done in clients))
    return sum(client.errors for client, _ in clients)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _instructions(out_file: Path) -> int:
    """The instruction count a callgrind output file holds (its totals line, at the end)."""
    for line in reversed(out_file.read_text().splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out_file}")


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


# What each part of the sidecar's request path costs, by the compiled functions that do it
# (mypyc names a module's function CPyDef_<module>___<name>, a method ...<Class>___<name>):
# (part, its functions, the functions of parts nested in it). A part's figure is its
# functions' inclusive cost less its nested parts', so the parts are disjoint: the relay
# lane starts a call from the request parser's callback and answers from the upstream
# connection's.
_TAKE = "CPyDef__app___RelayLane___take"
_ANSWER = "CPyDef__app____Relayed_____call__"
_MEMBERS = "CPyDef__app___SidecarApp____members"
# The payload hash, the head presigned once a second, and each request's signature: the
# same functions whether a request's head is found by the lane or built by the handler.
_SIGNING = (
    "CPyDef_sigv4___payload_sha256",
    "CPyDef_sigv4___PresignedHead___head",
    "CPyDef_request___RequestSigner___presigned",
    "CPyDef_request___RequestSigner___is_current",
)
_ROUTE_START = (
    "CPyDef__router___Router___resolve",
    "CPyDef__route___Route___pick",
    "CPyDef__route___Route___start",
)
_ROUTE_FINISH = "CPyDef__route___Route___finish"
_METRICS = (
    "CPyDef__metrics___SidecarMetrics___record",
    "CPyDef__metrics___SidecarMetrics___route_label",
    "CPyDef_prometheus___GatewayMetrics_____call__",
    "CPyDef_prometheus___GatewayMetrics___call_answered",
)
_DEADLINE = "CPyDef_deadlines___DeadlineWheel___arm"
# The lane's answer (_relayed_response) or the handler's (_result_response).
_FIELDS = ("CPyDef__app____relayed_response", "CPyDef__app____result_response")
_ENCODING = "CPyDef_writing___ResponseWriter___encode"
FEATURES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "request parsing (HTTP server)",
        ("CPyDef_parsing___RequestReader___data_received",),
        (_TAKE,),
    ),
    ("request headers to members", (_MEMBERS,), ()),
    ("signing (SigV4, with the payload hash)", _SIGNING, ()),
    ("routing (resolve, pick, start, finish)", (*_ROUTE_START, _ROUTE_FINISH), ()),
    ("metrics (sidecar's and the gateway's hook)", _METRICS, ()),
    ("request timeout (deadline wheel)", (_DEADLINE,), ()),
    (
        "relay lane: the call started and sent (its other steps)",
        (_TAKE,),
        (_MEMBERS, *_SIGNING, *_ROUTE_START, _DEADLINE),
    ),
    ("upstream answer parsing", ("CPyDef_connection___Connection___data_received",), (_ANSWER,)),
    (
        "relay lane: the answer (its other steps)",
        (_ANSWER,),
        (*_FIELDS, _ENCODING, _ROUTE_FINISH, *_METRICS),
    ),
    ("answer fields relayed", _FIELDS, ()),
    ("answer encoding", (_ENCODING,), ()),
)


def attribute(out_file: Path, requests: int) -> dict[str, float]:
    """Instructions per request inside each of FEATURES' parts (compiled build)."""
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", str(out_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parts_of(annotated, requests)


def parts_of(annotated: str, requests: int) -> dict[str, float]:
    """FEATURES' parts per request, from ``callgrind_annotate --inclusive=yes`` text."""
    inclusive: dict[str, int] = {}
    for line in annotated.splitlines():
        # "  1,234,567 ( 1.23%)  file.c:function [object]"
        found = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+)", line)
        if found is not None:
            function = found.group(2).rsplit(":", 1)[-1]
            inclusive.setdefault(function, int(found.group(1).replace(",", "")))

    def cost(functions: tuple[str, ...]) -> int:
        return sum(inclusive.get(function, 0) for function in functions)

    def part(functions: tuple[str, ...], nested: tuple[str, ...]) -> float:
        # Without the lane (relay_lane = false, an older build) its parts cost nothing.
        own = cost(functions)
        return (own - cost(nested)) / requests if own else 0.0

    return {name: part(functions, nested) for name, functions, nested in FEATURES}


def by_library(out_file: Path, requests: int) -> dict[str, float]:
    """Instructions per request spent in each shared object's own code (callgrind's self cost).

    Where the time goes by kind: the interpreter's object runtime (libpython),
    hashing (libcrypto), the compiled hot path, the parser, the loop.
    """
    annotated = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--auto=no", str(out_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {library: count / requests for library, count in self_cost_by_library(annotated)}


_SELF_COST_LINE = re.compile(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S*?):(\S+)(?:\s+\[(.+)\])?\s*$")
# Inlined code that callgrind names by a header file, without its object: mypyc's
# functions (CPyDef_..., CPyPy_...) are the compiled hot path's, a header of
# CPython's own source tree (Include/) the interpreter's; the rest is unnamed.
_COMPILED = "the compiled hot path (inlined)"
_INTERPRETER = "libpython (inlined)"
_UNNAMED = "(inlined, no object named)"


def self_cost_by_library(annotated: str) -> list[tuple[str, int]]:
    """``callgrind_annotate``'s self-cost lines summed by object, the largest first."""
    totals: dict[str, int] = {}
    for line in annotated.splitlines():
        found = _SELF_COST_LINE.match(line)
        if found is None:
            continue
        count, source, function, library = found.groups()
        if library:
            name = Path(library).name
        elif function.startswith("CPy"):
            name = _COMPILED
        else:
            name = _INTERPRETER if "/Include/" in source else _UNNAMED
        totals[name] = totals.get(name, 0) + int(count.replace(",", ""))
    return sorted(totals.items(), key=lambda item: -item[1])


def _merged(base: dict[str, object], overlay: dict[str, object]) -> dict[str, object]:
    merged = dict(base)
    for key, value in overlay.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _merged(current, value)
        else:
            merged[key] = value
    return merged


def sidecar_instructions(
    tree: Path,
    requests: int,
    concurrency: int,
    overlay: dict[str, object] | None = None,
    features: dict[str, float] | None = None,
    libraries: dict[str, float] | None = None,
    sdk_headers: bool = False,
) -> float:
    """Instructions the sidecar of ``tree`` runs per request (after a warm-up).

    ``overlay`` is merged into its config; ``features``, when given, is filled
    with :func:`attribute`'s figures; ``sdk_headers``: requests shaped as boto3's.
    """
    with tempfile.TemporaryDirectory(prefix="instructions-") as directory, StubServer() as stub:
        config = Path(directory, "sidecar.json")
        config.write_text(json.dumps(_merged(sidecar_config(stub.url), overlay or {})))
        port = _free_port()
        out = Path(directory, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        command += [f"--callgrind-out-file={out}", sys.executable, "-m", "gateway", "sidecar"]
        command += ["--listen", f"127.0.0.1:{port}", "--config", str(config)]
        command += ["--log-level", "WARNING"]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        process = subprocess.Popen(
            command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        try:
            assert process.stdout is not None
            if b"listening" not in process.stdout.readline():
                raise RuntimeError("the sidecar did not start under valgrind")
            asyncio.run(_drive(port, _WARM_UP, concurrency, sdk_headers))
            _callgrind(process.pid, "-i", "on")
            errors = asyncio.run(_drive(port, requests, concurrency, sdk_headers))
            time.sleep(0.5)  # the last answers leave the sidecar
            _callgrind(process.pid, "-i", "off")
            _callgrind(process.pid, "--dump")
        finally:
            process.terminate()
            process.wait(60)
        if errors:
            raise RuntimeError(f"{errors} requests failed")
        # The first dump (callgrind.out.1) holds the instrumented requests only.
        dump = Path(directory, "callgrind.out.1")
        if features is not None:
            features.update(attribute(dump, requests))
        if libraries is not None:
            libraries.update(by_library(dump, requests))
        return _instructions(dump) / requests


def library_instructions(tree: Path, calls: int, metrics: bool) -> float:
    """Instructions one sequential ``Gateway.invoke`` of ``tree`` runs."""
    counts = []
    with tempfile.TemporaryDirectory(prefix="instructions-") as directory, StubServer() as stub:
        for count in (calls, 3 * calls):
            out = Path(directory, f"callgrind.{count}")
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
            command += [sys.executable, "-c", _LIBRARY_SCRIPT, stub.url, str(count)]
            command += ["1" if metrics else "0"]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(command, cwd=directory, env=env, check=True, capture_output=True)
            counts.append(_instructions(out))
    return (counts[1] - counts[0]) / (2 * calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--library", action="store_true", help="Gateway.invoke, not the sidecar")
    parser.add_argument("--metrics", action="store_true", help="library: with the metrics hook")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1, help="sidecar connections")
    parser.add_argument(
        "--config-json", type=json.loads, default={}, help="merged into the sidecar's config"
    )
    parser.add_argument(
        "--attribute", action="store_true", help="sidecar: instructions per feature (compiled)"
    )
    parser.add_argument(
        "--sdk-headers",
        action="store_true",
        help="sidecar: requests with boto3's fields (ten, against the plain request's four)",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    tree = args.tree.resolve()
    features: dict[str, float] | None = None
    libraries: dict[str, float] = {}
    if args.library:
        per_call = library_instructions(tree, args.requests // 2, args.metrics)
        what = "Gateway.invoke" + (" with metrics" if args.metrics else "")
    else:
        features = {} if args.attribute else None
        per_call = sidecar_instructions(
            tree,
            args.requests,
            args.concurrency,
            args.config_json,
            features,
            libraries,
            args.sdk_headers,
        )
        what = f"sidecar request at concurrency {args.concurrency}"
        if args.sdk_headers:
            what += ", boto3's fields"
        if args.config_json:
            what += f" with {json.dumps(args.config_json)}"
    print(f"{tree}: {per_call:,.0f} instructions per {what}")
    if features is not None:
        if not any(features.values()):
            print("no per-feature figures: the hot path of this tree is not compiled")
        for name, count in features.items():
            print(f"  {count:>9,.0f}  {100 * count / per_call:5.1f}%  {name}")
        print("by library (each one's own code, callgrind's self cost):")
        for name, count in libraries.items():
            print(f"  {count:>9,.0f}  {100 * count / per_call:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

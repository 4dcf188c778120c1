"""Walkthroughs in docs/ as steps a test runs: every marked code block, in page order.

A code block of the tutorial and the how-to guides says what the test does with it, in an
HTML comment on the line before its fence (invisible on the site):

- ``<!-- run -->``: run it (``bash`` under ``set -euo pipefail``, ``python`` as a script)
  and expect exit status 0. Options: ``status=N`` (another exit status),
  ``expect="text"`` (repeatable: text its output must contain), ``timeout=S``.
- ``<!-- run: background ready="text" -->``: start it and wait for a line of output
  containing ``text``: a server the next steps use, stopped when the page is done.
- ``<!-- file: NAME -->``: write the block to NAME (a config, a script the next steps run).
- ``<!-- skip: REASON -->``: not run here (it needs AWS, Docker, a cluster, ...); the
  reason is required.

Steps run in a scratch folder holding a link to the checkout's ``examples/``, with
``python`` being the interpreter of the tests. Every loopback port a page names
(``127.0.0.1:8080``) is replaced by a free one wherever the page mentions it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Languages whose blocks must say what the test does with them.
CHECKED_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "python", "py", "toml"})
_MARKER = re.compile(r"^<!-- (?P<kind>run|file|skip)(?::\s*(?P<rest>.*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<fence>```+)\s*(?P<lang>[\w+-]*)")
_PORT = re.compile(r"(?<=(?:127\.0\.0\.1|localhost):)(\d{4,5})\b")


@dataclass
class Step:
    page: str
    line: int  # of the fence
    kind: str  # run, file, skip, or "" for an unmarked block
    lang: str
    code: str
    rest: str = ""  # the marker's text after the colon
    options: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def option(self, name: str, default: str | None = None) -> str | None:
        values = self.options.get(name)
        return values[-1] if values else default


def walkthrough_pages() -> list[Path]:
    return [DOCS / "tutorial.md", *sorted((DOCS / "how-to").glob("*.md"))]


def steps(page: Path) -> list[Step]:
    """The page's code blocks, each with the marker on the line before it (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Step] = []
    index = 0
    name = str(page.relative_to(ROOT))
    while index < len(lines):
        opening = _FENCE.match(lines[index].strip())
        if opening is None:
            index += 1
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        fence, start = opening["fence"], index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:])
            index += 1
        index += 1
        marker = _MARKER.match(lines[start - 1].strip()) if start else None
        step = Step(name, start + 1, "", opening["lang"].lower(), "\n".join(body) + "\n")
        if marker is not None:
            step.kind, step.rest = marker["kind"], marker["rest"] or ""
            if step.kind == "run":
                for token in shlex.split(step.rest):
                    key, _, value = token.partition("=")
                    step.options.setdefault(key, []).append(value)
        out.append(step)
    return out


def unmarked(page: Path) -> list[str]:
    """Checked-language blocks with no marker, and markers that lack what they need."""
    problems = []
    for step in steps(page):
        if step.lang in CHECKED_LANGUAGES and not step.kind:
            problems.append(f"{step.where}: a {step.lang} block with no run/file/skip marker")
        if step.kind in {"file", "skip"} and not step.rest:
            problems.append(f"{step.where}: {step.kind} needs a name or a reason")
        if step.kind == "run" and step.lang not in {"bash", "sh", "shell", "python", "py"}:
            problems.append(f"{step.where}: cannot run a {step.lang or 'plain'} block")
    return problems


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Background:
    """A server a page started: its output is collected until it is stopped."""

    def __init__(self, step: Step, process: subprocess.Popen[str]) -> None:
        self.step = step
        self.process = process
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()
        with self._seen:
            self._seen.notify_all()

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._seen:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"{self.step.where}: no line with {text!r} within {timeout:g} s; "
                        f"output:\n{''.join(self.lines)}"
                    )
                self._seen.wait(min(left, 0.5))

    def stop(self) -> str:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return "".join(self.lines)


class Walkthrough:
    """Runs one page's steps in ``workdir``."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page = page
        self.steps = steps(page)
        self.workdir = workdir
        (workdir / "examples").symlink_to(ROOT / "examples")
        bin_dir = workdir / ".bin"
        bin_dir.mkdir()
        # A script, not a link: a link to a virtualenv's python is not in that virtualenv.
        python = bin_dir / "python"
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        ports = {port for step in self.steps for port in _PORT.findall(step.code)}
        self.ports = {port: str(_free_port()) for port in sorted(ports)}
        self.background: list[Background] = []
        self.log: list[str] = []

    def _localised(self, code: str) -> str:
        # Every mention of a port the page gives an address with (`--port 6379` too).
        if not self.ports:
            return code
        mentioned = re.compile(r"\b(" + "|".join(self.ports) + r")\b")
        return mentioned.sub(lambda match: self.ports[match[1]], code)

    def run(self) -> None:
        try:
            for step in self.steps:
                if step.kind == "file":
                    path = self.workdir / step.rest
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(self._localised(step.code), encoding="utf-8")
                elif step.kind == "run":
                    self._run(step)
        finally:
            for server in reversed(self.background):
                self.log.append(f"--- {server.step.where} (background)\n{server.stop()}")

    def _command(self, step: Step) -> list[str]:
        code = self._localised(step.code)
        if step.lang in {"python", "py"}:
            return [sys.executable, "-c", code]
        return ["bash", "-euo", "pipefail", "-c", code]

    def _run(self, step: Step) -> None:
        timeout = float(step.option("timeout", "120") or 120)
        if "background" in step.options:
            process = subprocess.Popen(
                self._command(step),
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            server = Background(step, process)
            self.background.append(server)
            ready = step.option("ready")
            if ready:
                server.wait_for(ready, timeout)
            return
        try:
            result = subprocess.run(
                self._command(step),
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{step.where}: still running after {timeout:g} s") from exc
        output = result.stdout + result.stderr
        self.log.append(f"--- {step.where}\n{output}")
        status = int(step.option("status", "0") or 0)
        assert result.returncode == status, (
            f"{step.where}: exit status {result.returncode}, expected {status}\n{output}"
        )
        for text in step.options.get("expect", []):
            assert text in output, f"{step.where}: output lacks {text!r}\n{output}"


def runnable(page: Path) -> bool:
    return any(step.kind == "run" for step in steps(page))


def iter_steps() -> Iterator[Step]:
    for page in walkthrough_pages():
        yield from steps(page)

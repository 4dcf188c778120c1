"""Generated HTTP/1.1 messages near the plain shape the C fast paths take.

``plain_answer`` (``gateway/_http/_heads.c``) and ``plain_request``
(``gateway/_server/_request_heads.c``) each accept a strict subset of what
llhttp accepts. Their tests hold every message a fast path takes to llhttp's
reading of it; these strategies make the messages: a first line, ordinary
fields and the fields llhttp must judge (framing, folds, bytes outside the plain
syntax), Content-Length values of every shape, stray line ends, a body cut
short or followed by more.
"""

from __future__ import annotations

from hypothesis import strategies as st

# Fields neither fast path may take: framing, the connection's fate, folds, bytes
# outside the plain syntax, lines that are not fields.
REFUSED_FIELDS = (
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"Connection: keep-alive",
    b"connection: Upgrade",
    b"Upgrade: h2c",
    b" folded: continuation",
    b"\tfolded",
    b"x-space-before-colon : v",
    b"x-obs-text: caf\xe9",
    b"x-control: a\x01b",
    b"x-del: a\x7fb",
    b"x-nul: a\x00b",
    b"no-colon",
    b": no-name",
    b"x{brace}: v",
)
# Plain fields whose values have blanks where llhttp keeps or drops them.
BLANK_FIELDS = (b"x-empty:", b"x-spaces:   a  b  ", b"x-tab:\tv\t", b"x-blanks:\t \t")

_ARBITRARY_FIELDS = st.builds(
    lambda name, value: name + b":" + value,
    st.binary(min_size=1, max_size=8),
    st.binary(max_size=8),
)
_LENGTH_SHAPES = st.sampled_from(
    [b"%d", b" %d", b"%d ", b"\t%d\t", b"0%d", b"+%d", b"%d,%d", b"%d %d", b"", b"-%d", b"0x%d"]
)
_LENGTH_NAMES = st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-LENGTH"])
_STRAY_LINE_ENDS = st.sampled_from([b"\n", b"\r", b"\r\r\n", b"\n\r"])


def fields(*plain: bytes) -> st.SearchStrategy[bytes]:
    """One field line: half the time one of ``plain`` or a blank-valued one, else a refused
    one or any bytes (a message is taken only if all its fields are plain)."""
    taken = st.sampled_from([*plain, *BLANK_FIELDS])
    return taken | taken | st.sampled_from(REFUSED_FIELDS) | _ARBITRARY_FIELDS


@st.composite
def messages(
    draw: st.DrawFn,
    first_lines: st.SearchStrategy[bytes],
    field_lines: st.SearchStrategy[bytes],
    another: bytes,
    max_fields: int = 8,
) -> bytes:
    """A message: a first line, fields with usually one Content-Length (of any shape,
    usually the body's), a body, and now and then ``another`` message or a stray byte."""
    body = draw(st.binary(max_size=40))
    lines = draw(st.lists(field_lines, max_size=max_fields))
    for _ in range(draw(st.sampled_from([1] * 6 + [0, 2]))):
        declared = len(body) + draw(st.sampled_from([0] * 6 + [-1, 1]))
        shape = draw(_LENGTH_SHAPES)
        value = shape.replace(b"%d", b"%d" % declared) if declared >= 0 else b"%d"
        lines.insert(draw(st.integers(0, len(lines))), draw(_LENGTH_NAMES) + b":" + value)
    lines.insert(0, draw(first_lines))
    ends = [b"\r\n"] * len(lines)
    if draw(st.sampled_from([False] * 3 + [True])):  # a stray line end, on one line of a quarter
        ends[draw(st.integers(0, len(ends) - 1))] = draw(_STRAY_LINE_ENDS)
    head = b"".join(line + end for line, end in zip(lines, ends, strict=True))
    message = head + draw(st.sampled_from([b"\r\n"] * 8 + [b"\n", b""])) + body
    return message + draw(st.sampled_from([b""] * 8 + [another, b"x"]))

"""A read that is exactly one plain request, in one pass; and a relayed answer, in one
copy (``_request_heads.c``)."""

def bind_names(names: tuple[str, ...], kept: tuple[str, ...] = (), /) -> None: ...
def plain_request(
    data: bytes, max_head: int, max_fields: int, max_body: int, /
) -> tuple[str, str, dict[str, str], bytes] | None: ...
def copied_answer(
    status_line: bytes, lines: bytes, date_line: bytes, server_line: bytes, body: bytes, /
) -> bytes: ...

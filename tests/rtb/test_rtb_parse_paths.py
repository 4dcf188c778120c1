"""Two error paths the straight-line parser reports that the helper-based one did not.

* ``device.ipv6`` is type-checked even when ``device.ip`` is present (it was
  skipped then).
* A bad ``regs.ext.gpp_sid`` is named by its real path (it was reported as
  ``regs.ext.gpp_sid.gpp_sid``).
"""

from __future__ import annotations

import orjson
import pytest

from gateway.rtb import InvalidBidRequest, parse_bid_request


def request(**sections: object) -> bytes:
    return orjson.dumps({"id": "r", "imp": [{"id": "1", "banner": {}}], **sections})


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"device": {"ip": "1.2.3.4", "ipv6": [6]}}, "device.ipv6: expected string, got array"),
        ({"regs": {"ext": {"gpp_sid": "7"}}}, "regs.ext.gpp_sid: expected array, got string"),
        ({"regs": {"ext": {"gpp_sid": [7, "x"]}}}, "regs.ext.gpp_sid[1]: expected integer"),
    ],
)
def test_error_names_the_exact_path(sections: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidBidRequest) as info:
        parse_bid_request(request(**sections))
    assert str(info.value).startswith(message)


def test_ext_gpp_sid_is_read_when_the_26_field_is_absent_or_empty() -> None:
    assert parse_bid_request(request(regs={"ext": {"gpp_sid": [7]}})).regs.gpp_sid == (7,)
    regs = {"gpp_sid": [], "ext": {"gpp_sid": [2, 6]}}
    assert parse_bid_request(request(regs=regs)).regs.gpp_sid == (2, 6)

"""The emulator stays on loopback unless told otherwise; its control API is not for strangers."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from gateway.emulator import ConfigError, Emulator, EmulatorConfig

TOKEN = "control-token-for-tests"


def _outward_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address: str = probe.getsockname()[0]
    assert not address.startswith("127."), "the test needs a non-loopback interface"
    return address


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "emulator.internal"])
def test_binding_beyond_loopback_needs_allow_remote(host: str) -> None:
    with pytest.raises(ConfigError, match="--allow-remote"):
        Emulator(EmulatorConfig.default(), host, 0)


def test_the_command_refuses_a_remote_bind_without_the_flag() -> None:
    command = [sys.executable, "-m", "gateway.emulator", "--listen", "0.0.0.0:0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_control_api_answers_loopback_or_the_token_only(token: str | None) -> None:
    config = EmulatorConfig.default()
    async with Emulator(config, "0.0.0.0", 0, allow_remote=True, control_token=token) as emu:
        remote = f"http://{_outward_address()}:{emu.port}"
        async with httpx.AsyncClient() as http:
            local = await http.get(f"http://127.0.0.1:{emu.port}/_emulator/stats")
            stranger = await http.post(f"{remote}/_emulator/faults/echo", json={"reset_rate": 1.0})
            wrong = await http.get(
                f"{remote}/_emulator/stats", headers={"Authorization": "Bearer nope"}
            )
            right = await http.get(
                f"{remote}/_emulator/stats", headers={"Authorization": f"Bearer {token}"}
            )
            # The SageMaker API itself is served to remote callers as before.
            ping = await http.get(f"{remote}/ping")
        # The stranger's fault change never happened.
        assert emu._service.endpoint("echo").faults.reset_rate == 0.0
    assert local.status_code == 200
    assert stranger.status_code == 403 and wrong.status_code == 403
    assert right.status_code == (200 if token else 403)
    assert ping.status_code == 200

"""``python -m gateway COMMAND ...``: emulator, sidecar, demo, loadtest."""

from __future__ import annotations

import importlib
import sys

# Each command lives in its own module, imported only when used, so that
# starting the emulator never pays for importing the sidecar and the reverse.
_COMMANDS = {
    "emulator": ("gateway.emulator", "run a local SageMaker Runtime emulator"),
    "sidecar": ("gateway.sidecar", "run the sidecar proxy (SageMaker Runtime API on a local port)"),
    "demo": (
        "gateway.tools.demo",
        "the main job: RTB traffic through the gateway, on the emulator",
    ),
    "loadtest": (
        "gateway.tools.loadtest",
        "staged load test against a route, the sidecar or the emulator",
    ),
}


def _usage() -> str:
    lines = ["usage: python -m gateway [--version] COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_text}" for name, (_, help_text) in _COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from gateway._host.version import __version__

        print(f"sagemaker-gateway {__version__}")
        return 0
    command = _COMMANDS.get(args[0])
    if command is None:
        print(f"unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(command[0])
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    sys.exit(main())

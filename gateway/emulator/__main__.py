"""``python -m gateway.emulator --listen HOST:PORT [--config FILE]``."""

import sys

from gateway.emulator import main

sys.exit(main())

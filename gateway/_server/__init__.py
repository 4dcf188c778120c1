"""The kit only the sidecar and the emulator use: HTTP server, SigV4 verification, child processes.

The client never imports this package.
"""

"""Protocols both the client and the servers speak: SigV4 and the event stream."""

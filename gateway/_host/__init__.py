"""What the library reads from and sets on its host process: build, version, GC, TLS trust."""

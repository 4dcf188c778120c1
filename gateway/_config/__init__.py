"""Configuration: the TOML reader, the options, the environment, and their assembly at start."""

"""The call pipeline: the operation table, routing plans, attempts, the cache wrapper, streams."""

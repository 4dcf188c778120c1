"""The parts of ``gateway.compat``: botocore's runtime clients built from the operation table."""

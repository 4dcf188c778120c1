"""Programs built on the library (the demo, the load test); not part of the library API."""

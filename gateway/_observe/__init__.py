"""What the library tells about its calls: events, metrics, Prometheus, traces."""

"""What the library tells about its calls: one stream of events, and the sinks fed by it.

- ``events``: the vocabulary, the typed events calls emit.
- ``hooks``: where hooks are registered, and the ``emit`` the call path calls.
- ``families``: every metric family (gateway, sidecar, RTB proxy), declared once.
- ``counting``: the histogram and label cap every metric sink counts with.
- Sinks, one a module: ``prometheus`` (the gateway's metrics), ``tracing``
  (OpenTelemetry spans) and ``logs`` (the state-change log lines).

Nothing here imports the call pipeline but its operation table: the pipeline
emits, the sinks only listen.
"""

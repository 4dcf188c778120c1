"""The client's HTTP/1.1 layer: interfaces, messages, the native and httpx transports.

No SageMaker knowledge lives here.
"""

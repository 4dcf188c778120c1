# The sidecar image: the wheel is built (hot path compiled with mypyc) in a
# stage that has a C compiler; the runtime stage is a slim Python with only
# the wheel and its dependencies, run as a non-root user.
#
#   docker build -t sagemaker-gateway .
#   docker run --rm -p 8081:8081 -p 9091:9091 \
#       -v $PWD/gateway.toml:/etc/sagemaker-gateway/gateway.toml:ro sagemaker-gateway
#
# tests/deploy/test_dockerfile.py runs this file's RUN steps, in order, in a
# clean virtualenv (Docker itself is not needed for the test).
#
# Reproducible: the base image is pinned by digest (python:3.11-slim, the
# multi-platform index as published 2026-08-05: Python 3.11.15 on Debian
# trixie), and the runtime dependencies by version and hash
# (requirements-image.lock, installed with --require-hashes). To refresh:
#   docker buildx imagetools inspect python:3.11-slim     # "Digest:" line
#   SAGEMAKER_GATEWAY_BUILD=pure pip-compile --generate-hashes --extra redis \
#       --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
#       --output-file requirements-image.lock pyproject.toml
# and put the digest in both FROM lines.

FROM python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE CHANGELOG.md ./
COPY gateway ./gateway
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir dist .

FROM python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff
WORKDIR /app
COPY --from=build /src/dist ./dist
COPY requirements-image.lock ./
# The locked dependencies (the redis extra's included: a Redis tier is one
# environment variable away), then the wheel alone; pip check proves the lock
# covers everything the wheel asks for.
RUN python -m pip install --no-cache-dir --require-hashes -r requirements-image.lock \
    && python -m pip install --no-cache-dir --no-deps dist/*.whl \
    && python -m pip check \
    && rm -rf dist requirements-image.lock
# Traffic on 8081 (behind inbound auth); /livez, /readyz and /metrics on the
# admin listener, 9091, without it: the HEALTHCHECK and Prometheus ask there,
# so they need no credentials and keep working if the traffic port moves.
ENV PYTHONUNBUFFERED=1 \
    SAGEMAKER_GATEWAY__SIDECAR__LISTEN=0.0.0.0:8081 \
    SAGEMAKER_GATEWAY__SIDECAR__ADMIN_LISTEN=0.0.0.0:9091
USER 10001:10001
EXPOSE 8081 9091
HEALTHCHECK --interval=10s --timeout=2s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9091/livez', timeout=1.5)"]
ENTRYPOINT ["python", "-m", "gateway", "sidecar"]
CMD ["--config", "/etc/sagemaker-gateway/gateway.toml"]

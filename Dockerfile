# The sidecar image: the wheel is built (hot path compiled with mypyc) in a
# stage that has a C compiler; the runtime stage is a slim Python with only
# the wheel and its dependencies, run as a non-root user.
#
#   docker build -t sagemaker-gateway .
#   docker run --rm -p 8081:8081 -v $PWD/gateway.toml:/etc/sagemaker-gateway/gateway.toml:ro \
#       sagemaker-gateway
#
# tests/deploy/test_dockerfile.py runs this file's RUN steps, in order, in a
# clean virtualenv (Docker itself is not needed for the test).

FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE CHANGELOG.md ./
COPY gateway ./gateway
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir dist .

FROM python:3.11-slim
WORKDIR /app
COPY --from=build /src/dist ./dist
# The redis extra: a Redis tier is one environment variable away. Drop it for a near-cache-only image.
RUN python -m pip install --no-cache-dir "$(ls dist/*.whl)[redis]" && rm -rf dist
ENV PYTHONUNBUFFERED=1 \
    SAGEMAKER_GATEWAY__SIDECAR__LISTEN=0.0.0.0:8081
USER 10001:10001
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=2s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/livez', timeout=1.5)"]
ENTRYPOINT ["python", "-m", "gateway", "sidecar"]
CMD ["--config", "/etc/sagemaker-gateway/gateway.toml"]

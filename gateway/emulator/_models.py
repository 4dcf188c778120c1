"""What answers behind an emulated endpoint: echo, constant, XGBoost, a container.

Every model turns (body, content type, accept) into (body, content type), or
raises :class:`ModelFailure` with the status the "container" answered, which
the emulator reports as SageMaker's ``ModelError`` (424).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from gateway.emulator._config import MmeConfig, ModelConfig
from gateway.emulator._errors import SageMakerError

__all__ = ["Model", "ModelCache", "ModelFailure", "build_model"]


class ModelFailure(Exception):
    """The model container answered an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Model(Protocol):
    async def invoke(
        self, body: bytes, content_type: str, accept: str | None, target_model: str | None
    ) -> tuple[bytes, str]: ...

    async def close(self) -> None: ...


class _Predictor(Protocol):
    def predict(self, body: bytes, content_type: str, accept: str) -> tuple[bytes, str]: ...


class EchoModel:
    async def invoke(
        self, body: bytes, content_type: str, accept: str | None, target_model: str | None
    ) -> tuple[bytes, str]:
        return body, content_type

    async def close(self) -> None:
        return None


class ConstantModel:
    def __init__(self, body: bytes, content_type: str) -> None:
        self._answer = (body, content_type)

    async def invoke(
        self, body: bytes, content_type: str, accept: str | None, target_model: str | None
    ) -> tuple[bytes, str]:
        return self._answer

    async def close(self) -> None:
        return None


class XGBoostModel:
    """The RTB bid-filter model; loaded on first use (the loader is another module's)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        self._predictor: _Predictor | None = None

    def _load(self) -> _Predictor:
        from gateway.rtb.xgb import load_model

        predictor: _Predictor = load_model(self._options)
        return predictor

    async def invoke(
        self, body: bytes, content_type: str, accept: str | None, target_model: str | None
    ) -> tuple[bytes, str]:
        if self._predictor is None:
            try:
                self._predictor = self._load()
            except ImportError as exc:
                raise ModelFailure(500, f"the xgboost model is unavailable: {exc}") from None
        try:
            return self._predictor.predict(body, content_type, accept or "text/csv")
        except ValueError as exc:
            raise ModelFailure(400, str(exc)) from None

    async def close(self) -> None:
        return None


class ContainerModel:
    """Forwards to a container that follows the SageMaker contract (POST /invocations)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._client = httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout_s)

    async def invoke(
        self, body: bytes, content_type: str, accept: str | None, target_model: str | None
    ) -> tuple[bytes, str]:
        headers = {"Content-Type": content_type}
        if accept:
            headers["Accept"] = accept
        if target_model:
            headers["X-Amzn-SageMaker-Target-Model"] = target_model
        try:
            response = await self._client.post("/invocations", content=body, headers=headers)
        except httpx.TimeoutException:
            raise ModelFailure(504, "the model container did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ModelFailure(502, f"cannot reach the model container: {exc}") from None
        if response.status_code >= 400:
            raise ModelFailure(response.status_code, response.text)
        answer_type = response.headers.get("content-type", accept or "application/octet-stream")
        return response.content, answer_type

    async def close(self) -> None:
        await self._client.aclose()


def build_model(config: ModelConfig) -> Model:
    if config.type == "constant":
        return ConstantModel(config.body, config.content_type)
    if config.type == "xgboost":
        return XGBoostModel(dict(config.options))
    if config.type == "container":
        return ContainerModel(config.url or "", config.timeout_s)
    return EchoModel()


class ModelCache:
    """A multi-model endpoint's loaded models: cold loads, sharing, LRU eviction.

    The first call for a model starts its load (a task, so a caller that goes
    away does not abort it); calls arriving meanwhile wait on the same load,
    or get ModelNotReadyException when configured so.
    """

    def __init__(
        self,
        config: MmeConfig,
        on_load: Callable[[str], None],
        on_evict: Callable[[str], None],
    ) -> None:
        self._config = config
        self._allowed = frozenset(config.models)
        self._loaded: OrderedDict[str, None] = OrderedDict()
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._on_load = on_load
        self._on_evict = on_evict

    @property
    def loaded(self) -> list[str]:
        """Loaded models, least recently used first."""
        return list(self._loaded)

    def check_known(self, model: str) -> None:
        if self._config.allow_any or model in self._allowed:
            return
        raise SageMakerError(
            "ValidationError",
            f"Failed to download model data(bucket: sagemaker-emulator-models, key: {model}). "
            "Please ensure that there is an object located at the URL and that the role "
            "passed to CreateModel has permissions to download the model.",
        )

    async def ensure_loaded(self, model: str) -> bool:
        """Make ``model`` loaded; True if this call waited for a (cold) load."""
        if model in self._loaded:
            self._loaded.move_to_end(model)
            return False
        task = self._loading.get(model)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(model))
            self._loading[model] = task
        elif self._config.not_ready_if_loading:
            raise SageMakerError(
                "ModelNotReadyException",
                f"Model {model} is still loading. Please retry the request later.",
            )
        await asyncio.shield(task)
        return True

    async def _load(self, model: str) -> None:
        self._on_load(model)
        try:
            await asyncio.sleep(self._config.cold_load_ms / 1000)
            self._loaded[model] = None
            while len(self._loaded) > self._config.max_loaded:
                evicted, _ = self._loaded.popitem(last=False)
                self._on_evict(evicted)
        finally:
            del self._loading[model]

    async def close(self) -> None:
        for task in list(self._loading.values()):
            task.cancel()
        for task in list(self._loading.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

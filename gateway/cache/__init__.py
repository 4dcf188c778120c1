"""Prediction cache: keys, codec, in-process tier, Redis tier, single-flight.

Knows nothing of SageMaker. The gateway uses it like this::

    cache = PredictionCache(CacheConfig.from_mapping(toml["cache"]))
    await cache.start()                       # a dead Redis does not fail this
    key = cache.key_for(route, model, variant, content_type, accept, version_tag, body)
    entry = cache.peek_near(key)              # sync, ~0.3 us: answer before any await
    if entry is None:
        entry, source = await cache.get_or_load(key, load_from_sagemaker)
    ...
    await cache.close()
"""

from ._cache import CacheSource, Loader, PredictionCache, PredictionCacheProtocol
from ._codec import (
    FORMAT_VERSION,
    CodecError,
    CorruptEntryError,
    Entry,
    UnknownFormatError,
    decode_entry,
    encode_entry,
)
from ._config import CacheConfig, ConfigError
from ._keys import make_key
from ._stats import CacheStats

__all__ = [
    "FORMAT_VERSION",
    "CacheConfig",
    "CacheSource",
    "CacheStats",
    "CodecError",
    "ConfigError",
    "CorruptEntryError",
    "Entry",
    "Loader",
    "PredictionCache",
    "PredictionCacheProtocol",
    "UnknownFormatError",
    "decode_entry",
    "encode_entry",
    "make_key",
]

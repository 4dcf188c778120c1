"""OpenRTB pre-filter: parse bid requests, extract features, score, keep or drop.

As a library::

    async with Gateway(...) as gw:
        bid_filter = BidFilter(gw, "bid-filter", policy=FilterPolicy(threshold=0.01))
        decision = await bid_filter.decide(raw_body)      # Decision(keep, score, reason)
        future = bid_filter.submit(raw_body)              # no coroutine: a Future[Decision]
        ...
        await bid_filter.aclose()

Rules (`FilterPolicy(rules=...)`, ``[rtb.rules.<name>]``; `gateway.rtb.rules`)
drop, keep or re-threshold requests by OpenRTB attributes before scoring.

`parse_bid_request` raises `InvalidBidRequest` naming the bad field; the
filter keeps such a request unscored (`Reason.UNREADABLE`) unless `strict`.
Scoring is batched (`max_batch`, `max_wait`) into one text/csv call per
batch, and fails open: no score within the request's deadline (`tmax` less
`tmax_margin`) keeps it.

As a proxy: the sidecar's ``[rtb]`` table (`gateway.sidecar.RtbConfig`)
serves ``POST /openrtb2/auction``, answers 204 for dropped requests and
forwards kept ones to the bidders (``python -m gateway sidecar --config``).

Measured by ``python -m bench.rtb_throughput`` (rate sweep, emulator and
constant-score upstreams, CPU per request) and ``bench/test_rtb_bench.py``.

Runtime path (parse, features, evaluator, BidFilter) is pure Python plus
orjson; `gateway.rtb.train` and `gateway.rtb.report` need the train/plot
extras (xgboost, numpy, matplotlib).
"""

from gateway.rtb.features import (
    BUNDLED_FEATURES_PATH,
    Feature,
    FeatureSpec,
    default_feature_spec,
    load_bundled_spec,
    target_feature_spec,
)
from gateway.rtb.filter import (
    BidFilter,
    Decision,
    FilterStats,
    InProcessResult,
    InProcessScorer,
    Reason,
    Scorer,
)
from gateway.rtb.policy import SEGMENT_DIMENSIONS, FilterPolicy
from gateway.rtb.request import (
    DEFAULT_MAX_REQUEST_BYTES,
    App,
    BidRequest,
    Device,
    Geo,
    Imp,
    InvalidBidRequest,
    Publisher,
    Regs,
    Site,
    User,
    parse_bid_request,
)
from gateway.rtb.rules import RULE_PATHS, Rule
from gateway.rtb.xgb import BUNDLED_MODEL_PATH, XGBoostModel, XGBoostPredictor, load_model

__all__ = [
    "BUNDLED_FEATURES_PATH",
    "BUNDLED_MODEL_PATH",
    "DEFAULT_MAX_REQUEST_BYTES",
    "RULE_PATHS",
    "SEGMENT_DIMENSIONS",
    "App",
    "BidFilter",
    "BidRequest",
    "Decision",
    "Device",
    "Feature",
    "FeatureSpec",
    "FilterPolicy",
    "FilterStats",
    "Geo",
    "Imp",
    "InProcessResult",
    "InProcessScorer",
    "InvalidBidRequest",
    "Publisher",
    "Reason",
    "Regs",
    "Rule",
    "Scorer",
    "Site",
    "User",
    "XGBoostModel",
    "XGBoostPredictor",
    "default_feature_spec",
    "load_bundled_spec",
    "load_model",
    "parse_bid_request",
    "target_feature_spec",
]

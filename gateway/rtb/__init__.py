"""OpenRTB pre-filter: parse bid requests, extract features, score, keep or drop.

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
)
from gateway.rtb.filter import (
    SEGMENT_DIMENSIONS,
    BidFilter,
    Decision,
    FilterPolicy,
    FilterStats,
    InProcessResult,
    InProcessScorer,
    Reason,
    Scorer,
)
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
from gateway.rtb.xgb import BUNDLED_MODEL_PATH, XGBoostModel, XGBoostPredictor, load_model

__all__ = [
    "BUNDLED_FEATURES_PATH",
    "BUNDLED_MODEL_PATH",
    "DEFAULT_MAX_REQUEST_BYTES",
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
    "Scorer",
    "Site",
    "User",
    "XGBoostModel",
    "XGBoostPredictor",
    "default_feature_spec",
    "load_bundled_spec",
    "load_model",
    "parse_bid_request",
]

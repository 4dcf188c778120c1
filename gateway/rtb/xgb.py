"""A pure-Python evaluator for XGBoost JSON models (gbtree, numeric splits).

The whole ensemble is compiled into one straight-line Python function:
each tree becomes nested `if`/`else` on local variables, so scoring a row
is a few hundred float comparisons and no per-node lookups or calls.

Semantics follow XGBoost: inputs and thresholds are float32, a row goes
left when ``value < threshold``, and a missing value (NaN, or an empty CSV
field) follows the node's default direction. The `not (x >= t)` spelling
sends NaN left, `x < t` sends it right, so missing values cost nothing.

`predict_csv` is the SageMaker XGBoost container's text/csv contract:
headerless rows in, one prediction per line out, in order.
"""

from __future__ import annotations

import math
import tarfile
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

__all__ = ["BUNDLED_MODEL_PATH", "XGBoostModel", "XGBoostPredictor", "load_model"]

BUNDLED_MODEL_PATH: Final = Path(__file__).parent / "data" / "model.json"
# The model file in a model.tar.gz, where SageMaker's XGBoost container looks for it.
SAGEMAKER_MODEL_NAME: Final = "xgboost-model"

_SIGMOID_OBJECTIVES: Final = frozenset({"binary:logistic", "reg:logistic"})
_IDENTITY_OBJECTIVES: Final = frozenset(
    {"binary:logitraw", "reg:squarederror", "reg:linear", "reg:absoluteerror",
     "reg:pseudohubererror", "reg:squaredlogerror"}
)  # fmt: skip
_LOG_LINK_OBJECTIVES: Final = frozenset({"count:poisson", "reg:gamma", "reg:tweedie"})
# Python refuses more than 100 indentation levels; deeper trees would not compile.
_MAX_COMPILED_DEPTH: Final = 90

_Rows = Iterable[Sequence[float]]


def _model_bytes(path: Path) -> bytes:
    if not path.name.endswith((".tar.gz", ".tgz")):
        return path.read_bytes()
    with tarfile.open(path, "r:gz") as tar:  # the one member read: no extraction to disk
        member = tar.extractfile(SAGEMAKER_MODEL_NAME)
        if member is None:
            raise KeyError(f"{SAGEMAKER_MODEL_NAME} is not a file")
        return member.read()


def _f32(value: float) -> float:
    return array("f", (value,))[0]


class _Tree:
    """The arrays of one tree from the JSON model, validated."""

    def __init__(self, raw: Mapping[str, Any], index: int) -> None:
        try:
            self.left: list[int] = list(raw["left_children"])
            self.right: list[int] = list(raw["right_children"])
            self.feature: list[int] = list(raw["split_indices"])
            self.condition: list[float] = [_f32(float(c)) for c in raw["split_conditions"]]
            self.default_left: list[bool] = [bool(d) for d in raw["default_left"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"tree {index}: malformed ({exc!r})") from None
        if any(raw.get("split_type", ())):
            raise ValueError(f"tree {index}: categorical splits are not supported")
        sizes = {len(self.left), len(self.right), len(self.feature), len(self.condition)}
        if len(sizes) != 1 or len(self.default_left) != len(self.left) or not self.left:
            raise ValueError(f"tree {index}: node arrays differ in length")
        self.depth = self._check(index)

    def is_leaf(self, node: int) -> bool:
        return self.left[node] == -1

    def _check(self, index: int) -> int:
        """Children in range and no cycles; returns the depth."""
        seen: set[int] = set()
        depth = 0
        stack = [(0, 0)]
        while stack:
            node, level = stack.pop()
            if not 0 <= node < len(self.left) or node in seen:
                raise ValueError(f"tree {index}: bad child reference {node}")
            seen.add(node)
            depth = max(depth, level)
            if not self.is_leaf(node):
                stack += [(self.left[node], level + 1), (self.right[node], level + 1)]
        return depth


class XGBoostModel:
    """An XGBoost JSON model compiled to Python; thread-safe and immutable."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        learner = _get(document, "learner")
        params = _get(learner, "learner_model_param")
        self.objective: str = str(_get(_get(learner, "objective"), "name"))
        self.num_features: int = int(params.get("num_feature", 0))
        self.feature_names: tuple[str, ...] = tuple(learner.get("feature_names") or ())
        self.base_score: float = _base_score(params.get("base_score", "0.5"))
        booster = _get(learner, "gradient_booster")
        if booster.get("name") != "gbtree":
            raise ValueError(f"unsupported booster {booster.get('name')!r}: only gbtree")
        if str(params.get("num_class", "0")) not in ("0", "1"):
            raise ValueError("multi-class models are not supported")
        raw_trees = _get(_get(booster, "model"), "trees")
        self.trees: tuple[_Tree, ...] = tuple(_Tree(t, i) for i, t in enumerate(raw_trees))
        self._check_features()
        self._predict_many: Callable[[_Rows], list[float]] = self._compile()

    @classmethod
    def load(cls, path: str | Path) -> XGBoostModel:
        """A JSON model file, or a SageMaker ``model.tar.gz`` holding one as ``xgboost-model``."""
        try:
            document = orjson.loads(_model_bytes(Path(path)))
        except (OSError, tarfile.TarError, KeyError, orjson.JSONDecodeError) as exc:
            raise ValueError(f"cannot load XGBoost model from {path}: {exc}") from None
        if not isinstance(document, dict):
            raise ValueError(f"{path}: not an XGBoost JSON model")
        return cls(document)

    def predict_rows(self, rows: Iterable[Sequence[float]]) -> list[float]:
        """One prediction per row; rows are float sequences of `num_features` values."""
        try:
            return self._predict_many(array("f", row) for row in rows)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"bad input row: expected {self.num_features} numbers ({exc})"
            ) from None

    def predict_csv(self, body: bytes) -> bytes:
        """The text/csv contract: headerless rows in, one prediction per line out."""
        rows = _parse_csv(body, self.num_features)
        return "".join([f"{p!r}\n" for p in self._predict_many(rows)]).encode()

    # --- compilation ---

    def _check_features(self) -> None:
        used = {
            tree.feature[node]
            for tree in self.trees
            for node in range(len(tree.left))
            if not tree.is_leaf(node)
        }
        if self.num_features <= 0:
            self.num_features = max(used, default=0) + 1
        if any(not 0 <= feature < self.num_features for feature in used):
            raise ValueError("split feature index out of range")

    def _compile(self) -> Callable[[_Rows], list[float]]:
        if any(tree.depth > _MAX_COMPILED_DEPTH for tree in self.trees):
            return self._interpreted
        names = ", ".join(f"f{i}" for i in range(self.num_features)) + ","
        lines = [
            "def predict_many(rows):",
            "    out = []",
            "    append = out.append",
            "    for row in rows:",
            f"        {names} = row",
            f"        s = {self._base_margin()!r}",
        ]
        for tree in self.trees:
            _emit(tree, 0, 2, lines)
        lines += [f"        {line}" for line in _link_source(self.objective)]
        lines.append("    return out")
        namespace: dict[str, Any] = {"exp": math.exp}
        exec(compile("\n".join(lines), f"<xgboost:{len(self.trees)} trees>", "exec"), namespace)
        function: Callable[[_Rows], list[float]] = namespace["predict_many"]
        return function

    def _base_margin(self) -> float:
        if self.objective in _SIGMOID_OBJECTIVES:
            p = min(max(self.base_score, 1e-16), 1 - 1e-16)
            return math.log(p / (1 - p))
        if self.objective in _LOG_LINK_OBJECTIVES:
            return math.log(max(self.base_score, 1e-16))
        return self.base_score

    def _interpreted(self, rows: _Rows) -> list[float]:
        """Slow but unlimited-depth fallback for very deep trees."""
        link = _link(self.objective)
        out = []
        for row in rows:
            if len(row) != self.num_features:
                raise ValueError(f"row has {len(row)} values")
            margin = self._base_margin()
            for tree in self.trees:
                node = 0
                while not tree.is_leaf(node):
                    value = row[tree.feature[node]]
                    go_left = value < tree.condition[node] or (
                        math.isnan(value) and tree.default_left[node]
                    )
                    node = tree.left[node] if go_left else tree.right[node]
                margin += tree.condition[node]
            out.append(link(margin))
        return out


def _emit(tree: _Tree, node: int, indent: int, lines: list[str]) -> None:
    pad = "    " * indent
    if tree.is_leaf(node):
        lines.append(f"{pad}s += {tree.condition[node]!r}")  # a leaf's value
        return
    feature, threshold = tree.feature[node], tree.condition[node]
    if tree.default_left[node]:
        lines.append(f"{pad}if not (f{feature} >= {threshold!r}):")
    else:
        lines.append(f"{pad}if f{feature} < {threshold!r}:")
    _emit(tree, tree.left[node], indent + 1, lines)
    lines.append(f"{pad}else:")
    _emit(tree, tree.right[node], indent + 1, lines)


def _link_source(objective: str) -> list[str]:
    if objective in _SIGMOID_OBJECTIVES:
        # Split on sign so exp() never overflows.
        return [
            "if s >= 0.0:",
            "    append(1.0 / (1.0 + exp(-s)))",
            "else:",
            "    e = exp(s)",
            "    append(e / (1.0 + e))",
        ]
    if objective in _LOG_LINK_OBJECTIVES:
        return ["append(exp(s))"]
    return ["append(s)"]


def _link(objective: str) -> Callable[[float], float]:
    if objective in _SIGMOID_OBJECTIVES:
        return lambda s: 1.0 / (1.0 + math.exp(-s)) if s >= 0 else math.exp(s) / (1 + math.exp(s))
    if objective in _LOG_LINK_OBJECTIVES:
        return math.exp
    return lambda s: s


def _get(mapping: Any, key: str) -> Any:
    if not isinstance(mapping, Mapping) or key not in mapping:
        raise ValueError(f"not an XGBoost JSON model: missing {key!r}")
    return mapping[key]


def _base_score(raw: Any) -> float:
    """'5E-1' in XGBoost < 3.1, '[2.5E-2]' (one per target) from 3.1 on."""
    text = str(raw).strip().strip("[]")
    if "," in text:
        raise ValueError("multi-target models are not supported")
    return float(text)


def _parse_csv(body: bytes, width: int) -> list[array[float]]:
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("text/csv body is not ASCII") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) != width:
            raise ValueError(f"line {number}: {len(fields)} values, the model expects {width}")
        try:
            rows.append(array("f", map(float, fields)))
        except ValueError:
            rows.append(_parse_with_missing(fields, number))
    if not rows:
        raise ValueError("empty text/csv body: no rows")
    return rows


def _parse_with_missing(fields: list[str], number: int) -> array[float]:
    """Empty fields are missing values (NaN), as in the SageMaker XGBoost container."""
    try:
        return array("f", [float(f) if f.strip() else math.nan for f in fields])
    except ValueError:
        raise ValueError(f"line {number}: not a number in {','.join(fields)[:80]!r}") from None


# --- the emulator's model plug-in: gateway.rtb.xgb.load_model(config) ---


class XGBoostPredictor:
    """SageMaker-container-shaped wrapper: text/csv in; text/csv or JSON out."""

    def __init__(self, model: XGBoostModel) -> None:
        self.model = model

    def predict(self, body: bytes, content_type: str, accept: str) -> tuple[bytes, str]:
        if _media_type(content_type) != "text/csv":
            raise ValueError(
                f"unsupported content type {content_type!r}: this model takes text/csv"
            )
        wanted = _media_type(accept)
        if wanted in ("", "*/*", "text/*", "text/csv"):
            return self.model.predict_csv(body), "text/csv"
        if wanted == "application/json":
            scores = self.model.predict_rows(_parse_csv(body, self.model.num_features))
            return orjson.dumps({"predictions": [{"score": s} for s in scores]}), wanted
        raise ValueError(f"unsupported accept {accept!r}: use text/csv or application/json")


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].split(",", 1)[0].strip().lower()


def load_model(config: Mapping[str, Any]) -> XGBoostPredictor:
    """Emulator plug-in: config key `path` (default: the bundled bid-filter model)."""
    path = config.get("path") or BUNDLED_MODEL_PATH
    return XGBoostPredictor(XGBoostModel.load(path))

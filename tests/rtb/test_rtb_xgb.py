"""The pure-Python evaluator against xgboost itself."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gateway.rtb import BUNDLED_MODEL_PATH, XGBoostModel, load_model

# The train extra (in dev; not in the lowest-versions environment).
np = pytest.importorskip("numpy")
xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def model() -> XGBoostModel:
    return XGBoostModel.load(BUNDLED_MODEL_PATH)


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    rng = np.random.default_rng(42)
    # The bundled spec's columns: day, hour, four encodings (bid rates), device class,
    # two more encodings, app (0/1).
    scale = np.array([7, 24, 0.2, 0.2, 0.1, 0.1, 5, 0.1, 0.1, 2], dtype=np.float64)
    matrix = (rng.random((3000, 10)) * scale).astype(np.float32)
    matrix[:1000] = np.floor(matrix[:1000])  # integer rows, as the feature spec emits
    matrix[rng.random(matrix.shape) < 0.05] = np.nan  # missing values
    return matrix


def reference(path: Path, rows: np.ndarray) -> np.ndarray:
    booster = xgb.Booster()
    booster.load_model(str(path))
    return booster.predict(xgb.DMatrix(rows), validate_features=False)


def test_bundled_model_shape(model: XGBoostModel) -> None:
    assert model.objective == "binary:logistic"
    assert len(model.trees) == 50 and max(t.depth for t in model.trees) <= 5
    assert model.num_features == 10 and model.feature_names[0] == "day_of_week"


def test_matches_xgboost_on_many_rows(model: XGBoostModel, rows: np.ndarray) -> None:
    ours = np.array(model.predict_rows(rows.tolist()))
    assert np.max(np.abs(ours - reference(BUNDLED_MODEL_PATH, rows))) < 1e-6


def test_csv_contract_matches_rows(model: XGBoostModel, rows: np.ndarray) -> None:
    lines = [",".join("" if math.isnan(v) else repr(float(v)) for v in row) for row in rows[:200]]
    out = model.predict_csv("\n".join(lines).encode() + b"\n").decode().splitlines()
    assert len(out) == 200
    expected = reference(BUNDLED_MODEL_PATH, rows[:200])
    assert max(abs(float(a) - b) for a, b in zip(out, expected, strict=True)) < 1e-6


@pytest.mark.parametrize("objective", ["reg:squarederror", "binary:logistic"])
def test_matches_a_freshly_trained_model_with_defaults(tmp_path: Path, objective: str) -> None:
    rng = np.random.default_rng(7)
    features = rng.normal(size=(2000, 5)).astype(np.float32)
    features[rng.random(features.shape) < 0.1] = np.nan
    labels = (np.nan_to_num(features[:, 0]) + rng.normal(size=2000) > 0).astype(np.float32)
    params = {"objective": objective, "max_depth": 6, "nthread": 1, "seed": 1}
    booster = xgb.train(params, xgb.DMatrix(features, label=labels), num_boost_round=20)
    path = tmp_path / "m.json"
    booster.save_model(str(path))
    ours = np.array(XGBoostModel.load(path).predict_rows(features.tolist()))
    assert np.max(np.abs(ours - reference(path, features))) < 1e-5


def test_load_model_plugin_contract() -> None:
    predictor = load_model({})
    rows = b"2,14,0.01,0.02,0.03,0.02,2,0.03,0.02,0\n0,3,0,0,0,0,1,0,0,1"
    body, content_type = predictor.predict(rows, "text/csv", "text/csv")
    assert content_type == "text/csv" and len(body.splitlines()) == 2
    row = rows.splitlines()[0]
    body, content_type = predictor.predict(row, "text/csv; charset=utf-8", "*/*")
    assert content_type == "text/csv" and 0.0 < float(body) < 1.0
    body, content_type = predictor.predict(row, "text/csv", "application/json")
    assert content_type == "application/json" and b'"predictions"' in body


@pytest.mark.parametrize(
    ("body", "content_type", "accept", "message"),
    [
        (b"1,2,3", "text/csv", "text/csv", "3 values, the model expects 10"),
        (b"1,2,3,4,5,6,7,8,9,x", "text/csv", "text/csv", "not a number"),
        (b"", "text/csv", "text/csv", "no rows"),
        (b"\xff", "text/csv", "text/csv", "not ASCII"),
        (b"{}", "application/json", "text/csv", "unsupported content type"),
        (b"1,2,3,4,5,6,7,8,9,10", "text/csv", "application/x-protobuf", "unsupported accept"),
    ],
)
def test_bad_input_is_a_value_error(
    body: bytes, content_type: str, accept: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load_model({}).predict(body, content_type, accept)


def test_empty_fields_are_missing_values(model: XGBoostModel) -> None:
    with_missing = model.predict_csv(b"2,14,,0.02,,0.01,2,,0.03,1")
    assert len(with_missing.splitlines()) == 1


def test_bad_model_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load"):
        XGBoostModel.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"learner": {}}')
    with pytest.raises(ValueError, match="missing"):
        XGBoostModel.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot load"):
        load_model({"path": str(tmp_path / "missing.json")})

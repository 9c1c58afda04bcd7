"""The API as a new user reads it: /openapi.json is valid OpenAPI 3.1; each predict route has
its own typed rows generated from the data contract (every field described, quantities with
their unit, an example each; required and optional as in the contract); answers state their
units; Swagger UI and ReDoc load from the app's own assets. No model is needed for any of it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from pydantic import TypeAdapter, ValidationError

from perfcast.datasets.contract import SCHEMAS
from perfcast.predictor.backend import TASK_TABLES
from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.rows import ROW_TYPES, example_row
from perfcast.serving.settings import Settings


@pytest.fixture(scope="module")
def http() -> TestClient:
    tasks = tuple(TASK_TABLES)
    return TestClient(create_app(Settings(tasks=tasks), ServedModels(tasks)))  # no champions


@pytest.fixture(scope="module")
def spec(http) -> dict:
    return http.get("/openapi.json").json()


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _contract_columns(task: str) -> tuple[list[str], list[str]]:
    kind, targets = TASK_TABLES[task]
    columns = SCHEMAS[kind].columns
    names = [n for n in columns if n not in targets]
    return names, [n for n in names if columns[n].required]


def test_the_served_openapi_document_is_valid_openapi_3_1(spec) -> None:
    validate(spec)  # raises, naming the place, on any violation
    assert spec["openapi"].startswith("3.1")


@pytest.mark.parametrize("task", list(TASK_TABLES))
def test_each_predict_route_has_the_contract_rows_described_with_units(spec, task) -> None:
    operation = spec["paths"][f"/v1/predict/{task}"]["post"]
    request = _resolve(spec, operation["requestBody"]["content"]["application/json"]["schema"])
    row = _resolve(spec, request["properties"]["rows"]["items"])
    names, required = _contract_columns(task)
    assert set(names) <= set(row["properties"])
    assert sorted(row["required"]) == sorted(required)  # optional columns are optional
    assert row["additionalProperties"]  # further feature columns are passed on
    for name, field in row["properties"].items():
        assert field.get("description") and field.get("examples"), (task, name)
        types = {field.get("type")} | {t.get("type") for t in field.get("anyOf", [])}
        if types & {"integer", "number"} and not name.endswith("_id"):  # ids are no quantity
            assert field["x-unit"] and f"Unit: {field['x-unit']}." in field["description"]
    assert request["examples"] == [{"rows": [example_row(task)]}]
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    prediction = _resolve(spec, _resolve(spec, answer)["properties"]["predictions"]["items"])
    for target in TASK_TABLES[task][1]:
        for name in (target, f"{target}_p10", f"{target}_p90"):
            field = prediction["properties"][name]
            assert field["description"] and field["x-unit"], (task, name)


def test_costs_and_throughputs_state_their_units(spec) -> None:
    schemas = spec["components"]["schemas"]
    config = schemas["ConfigOut"]["properties"]
    for name in ("throughput", "throughput_per_gpu", "cost"):
        assert config[name]["x-unit"] and config[name]["description"], name
    assert "currency" in schemas["GpuPoolIn"]["properties"]["price_per_gpu_hour"]["x-unit"]
    assert schemas["QueryCandidate"]["properties"]["cost"]["x-unit"] == "currency"
    assert (
        "samples/s" in schemas["AllocateResponse"]["properties"]["total_throughput"]["description"]
    )


def test_swagger_and_redoc_load_from_the_apps_own_assets(http) -> None:
    for page, script in (("/docs", "/docs/assets/swagger-ui-bundle.js"),
                         ("/redoc", "/redoc/assets/redoc.standalone.js")):  # fmt: skip
        html = http.get(page)
        assert html.status_code == 200 and script in html.text
        assert "https://" not in html.text and "cdn" not in html.text.lower(), page
        asset = http.get(script)
        assert asset.status_code == 200 and len(asset.content) > 100_000
        assert "javascript" in asset.headers["content-type"]


def test_a_row_missing_a_required_column_is_refused_before_any_model_is_asked(http) -> None:
    row = example_row("scaling")
    del row["gpu_type"]
    r = http.post("/v1/predict/scaling", json={"rows": [example_row("scaling"), row]})
    assert r.status_code == 422  # not the 503 of a task without a model: the rows come first
    assert r.json()["detail"][0]["loc"] == ["body", "rows", 1, "gpu_type"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("parallelism", [True]), ("parallelism", ["4"]), ("parallelism", [2.5]),
     ("top_k", "3"), ("deadline_s", "60"), ("memory_limits_mb", [True])],
)  # fmt: skip
def test_the_query_recommendation_takes_numbers_as_numbers(http, field, value) -> None:
    request = {"rows": [example_row("query")], "parallelism": [1, 2], field: value}
    r = http.post("/v1/recommend/query", json=request)
    assert r.status_code == 422, r.text  # refused before any model is asked
    assert r.json()["detail"][0]["loc"][:2] == ["body", field]


# ---- the generated row types, as properties over the contract --------------------------------

_VALUES = {
    "integer": st.integers(1, 10**6),
    "number": st.floats(0.5, 1e6, allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
}


def _value(task: str, name: str) -> st.SearchStrategy:
    spec = SCHEMAS[TASK_TABLES[task][0]].columns[name]
    dtype = str(spec.dtype).lower()
    kind = "integer" if "int" in dtype else "boolean" if "bool" in dtype else \
        "number" if "float" in dtype else "string"  # fmt: skip
    allowed = next((c.statistics["allowed_values"] for c in spec.checks if c.name == "isin"), None)
    if allowed:  # an enumerated column (graph `mode`, interference `sharing`): one of its values
        return st.sampled_from(sorted(allowed))
    if kind == "string":
        return st.just(example_row(task).get(name, "x") if name != "placement" else "4")
    if kind == "number" and any(c.name == "in_range" for c in spec.checks):
        return st.floats(0, 100, allow_nan=False)
    most = next(  # a physical bound of the contract (`contract.at_most`)
        (c.statistics["max_value"] for c in spec.checks if c.name == "less_than_or_equal_to"),
        None,
    )
    if most is not None and kind == "integer":
        return st.integers(1, int(most))
    if most is not None and kind == "number":
        return st.floats(0.5, most, allow_nan=False)
    return _VALUES[kind]


@st.composite
def _rows(draw: st.DrawFn) -> tuple[str, dict, list[str]]:
    """A task, a row of its required columns and some optional ones (absent, null or set)."""
    task = draw(st.sampled_from(list(TASK_TABLES)))
    names, required = _contract_columns(task)
    row = {name: draw(_value(task, name)) for name in required}
    for name in names:
        if name not in required:
            choice = draw(st.sampled_from(["absent", "null", "set"]))
            if choice != "absent":
                row[name] = None if choice == "null" else draw(_value(task, name))
    return task, row, required


@settings(max_examples=150, deadline=None)
@given(_rows(), st.data())
def test_rows_pass_as_sent_and_each_required_column_is_required(case, data) -> None:
    task, row, required = case
    adapter = TypeAdapter(ROW_TYPES[task])
    assert adapter.validate_python(row) == row  # no value changed, no column added
    assert adapter.validate_python({**row, "extra_feature": 1.5})["extra_feature"] == 1.5
    dropped = data.draw(st.sampled_from(required))
    with pytest.raises(ValidationError) as err:
        adapter.validate_python({k: v for k, v in row.items() if k != dropped})
    assert [e["loc"] for e in err.value.errors()] == [(dropped,)]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([(t, n) for t in TASK_TABLES for n in _contract_columns(t)[1]
                     if "int" in str(SCHEMAS[TASK_TABLES[t][0]].columns[n].dtype).lower()]),
    st.one_of(st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer()),
              st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2)),
)  # fmt: skip
def test_an_integer_column_takes_integers_and_whole_floats_only(column, bad) -> None:
    task, name = column
    adapter = TypeAdapter(ROW_TYPES[task])
    row = example_row(task)
    assert adapter.validate_python({**row, name: float(row[name])})[name] == row[name]
    with pytest.raises(ValidationError) as err:
        adapter.validate_python({**row, name: bad})
    assert [e["loc"] for e in err.value.errors()] == [(name,)]

"""Every JSON file the converter writes validates against its schema in schemas/."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import mrvl_convert
from support.models import small_cnn

SCHEMAS = Path(__file__).parents[2] / "schemas"


def schema(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / f"{kind}.schema.json").read_text()))


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_schemas_are_valid_draft_2020_12(path):
    document = json.loads(path.read_text())
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(document)


def _no_repeated_key(pairs):
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    assert not repeated, f"key(s) given twice in one object (json keeps the last): {repeated}"
    return dict(pairs)


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_schemas_give_each_key_once(path):
    json.loads(path.read_text(), object_pairs_hook=_no_repeated_key)


def kind_of(name: str) -> str:
    if name.endswith("-nodes.json"):
        return "nodes"
    if name.endswith("-consts.json"):
        return "consts"
    return name[:-len(".json")]


@pytest.mark.parametrize("kwargs,policy", [({}, "single"), ({"sigmoid": True}, "multi"),
                                           ({"sigmoid": True}, "single"),
                                           ({"keras_transpose": True, "batch": 2}, "multi")])
def test_every_file_written_validates(tmp_path, kwargs, policy):
    result = mrvl_convert.convert(small_cnn(**kwargs), tmp_path / "o", policy=policy)
    jsons = [p for p in result.files if p.suffix == ".json"]
    assert {kind_of(p.name) for p in jsons} >= {"manifest", "report", "nodes", "consts"}
    for path in jsons:
        errors = list(schema(kind_of(path.name)).iter_errors(json.loads(path.read_text())))
        assert not errors, f"{path.name}: {errors[0].message}"
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(p.name for p in result.files)


def test_schemas_ship_inside_the_package():
    from importlib import resources
    shipped = {p.name for p in resources.files("mrvl_convert.schemas").iterdir()
               if p.name.endswith(".schema.json")}
    assert {"nodes.schema.json", "consts.schema.json", "manifest.schema.json",
            "report.schema.json", "rules.schema.json"} <= shipped


def test_schema_rejects_a_broken_nodes_json(tmp_path):
    result = mrvl_convert.convert(small_cnn(), tmp_path / "o")
    path = next(p for p in result.files if p.name.endswith("-nodes.json"))
    doc = json.loads(path.read_text())
    del doc["nodes"][1]["attrs"]["source_nodes"]
    assert list(schema("nodes").iter_errors(doc))



@pytest.mark.parametrize("field, value, where", [
    ("num_inputs", "x", "attrs/num_inputs"),               # intstr, through a $ref
    ("strides", ["1", 2], "attrs/strides/1"),              # intstrlist -> intstr: two $refs
    ("kernel_const", {"name": "k"}, "attrs/kernel_const"),  # const_ref's oneOf
])
def test_the_writers_validator_names_a_field_behind_a_ref(tmp_path, field, value, where):
    """The validator the writer uses has the schema's $refs inlined: it refuses what the
    schema refuses and names the same field."""
    from mrvl_convert.emit.validate import validate
    from mrvl_convert.errors import ArtifactError
    result = mrvl_convert.convert(small_cnn(), tmp_path / "o")
    path = next(p for p in result.files if p.name.endswith("-nodes.json"))
    doc = json.loads(path.read_text())
    k = next(k for k, n in enumerate(doc["nodes"]) if n["attrs"]["layer_name"] == ["Conv2D"])
    validate(doc, "nodes", label=path.name)
    doc["nodes"][k]["attrs"][field] = value
    assert list(schema("nodes").iter_errors(doc))
    with pytest.raises(ArtifactError,
                       match=f"does not match nodes.schema.json at nodes/{k}/{where}:"):
        validate(doc, "nodes", label=path.name)

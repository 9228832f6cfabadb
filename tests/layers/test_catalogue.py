"""The layer catalogue is the one home of a layer kind: the schemas, the docs and the golden
outputs follow it, and a kind missing from any of them fails here."""
from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

import mrvl_convert
from mrvl_convert.layers import CATALOGUE, UPSTREAM
from mrvl_convert.layers import docs as layer_docs
from mrvl_convert.rules.loader import load_rules
from mrvl_convert.kernels.base import Kernel

ROOT = Path(__file__).resolve().parents[2]


def _schema(name: str) -> dict:
    return json.loads((ROOT / "schemas" / name).read_text())


def test_rule_schema_layer_enum_is_the_catalogue():
    enum = _schema("rules.schema.json")["$defs"]["composite"]["properties"]["layer"]["enum"]
    assert sorted(enum) == sorted(CATALOGUE)


def test_nodes_schema_layer_name_enum_is_the_catalogue():
    layer = _schema("nodes.schema.json")["$defs"]["layer"]["properties"]["attrs"]["properties"]
    assert sorted(layer["layer_name"]["items"]["enum"]) == sorted(CATALOGUE)


def test_nodes_schema_describes_every_declared_attribute():
    props = _schema("nodes.schema.json")["$defs"]["layer"]["properties"]["attrs"]["properties"]
    for kind in CATALOGUE.values():
        for a in kind.attrs:
            assert a.name in props, f"{kind.name}.{a.name} is not in nodes.schema.json"
            if a.type == "activation":
                assert set(a.choices) <= set(props[a.name]["items"]["enum"]), a.name
            else:
                assert props[a.name] == {"$ref": f"#/$defs/{a.json_type}"}, a.name
        for c in kind.consts:
            assert props[c.attr] == {"$ref": "#/$defs/strlist"}, c.attr


def test_formats_doc_layer_table_is_generated_from_the_catalogue():
    text = (ROOT / "docs" / "FORMATS.md").read_text()
    assert layer_docs.rewrite(text) == text, "run: python -m mrvl_convert.layers.docs"
    for name in CATALOGUE:
        assert f"| `{name}` |" in text


def test_every_matched_kind_has_a_builtin_rule_and_a_line_in_supported_ops():
    doc = (ROOT / "docs" / "SUPPORTED_OPS.md").read_text()
    made = {r.layer for r in load_rules()}
    for kind in CATALOGUE.values():
        assert issubclass(kind.kernel, Kernel), kind.name
        if kind.lower is not None:
            assert kind.name in made, f"no built-in rule makes {kind.name}"
            assert f"`{kind.name}`" in doc, f"{kind.name} missing from docs/SUPPORTED_OPS.md"


def test_declared_defaults_encode_as_the_format_holds_them():
    """A default or fixed value must be one the emitter can write (a list of strings)."""
    from mrvl_convert.layers import REQUIRED
    for kind in CATALOGUE.values():
        for a in kind.attrs:
            for value in (a.default, a.fixed):
                if value is not None and value is not REQUIRED:
                    encoded = a.encode(value)
                    assert isinstance(encoded, list) and all(isinstance(v, str) for v in encoded)


# Nodes-JSON / Constants-JSON as they were before the catalogue existed (commit 29e3f99),
# with the upstream v0.19 layer set: the refactor and any later change must not alter them.
PINNED = {
    ("mnist_single", "mnist_cnn_mrvl_0-consts.json"):
        "d541a51beaa3d3913f070428ce3ce3230779f9f919ebd66d7612e01b32e33bbb",
    ("mnist_single", "mnist_cnn_mrvl_0-nodes.json"):
        "eb527864b4d07cf1a9d54696f8aac7a331622b5330aa2865aa57c8deb9696df5",
    ("mnist_multi", "mnist_cnn_mrvl_0-consts.json"):
        "d541a51beaa3d3913f070428ce3ce3230779f9f919ebd66d7612e01b32e33bbb",
    ("mnist_multi", "mnist_cnn_mrvl_0-nodes.json"):
        "eb527864b4d07cf1a9d54696f8aac7a331622b5330aa2865aa57c8deb9696df5",
    ("resnet50", "resnet50_mrvl_0-consts.json"):
        "cfc332f24338ad3b888b1f3350bdef47e7499c6c02e47b3bf925b4416f743d16",
    ("resnet50", "resnet50_mrvl_0-nodes.json"):
        "1b3a5cc46b7601133edd8aa2d94f21a4ae5be6c57979a0c3343ed026e56f7345",
}


def _resnet50():
    # benchmarks/models.py by path: benchmarks/ is not on sys.path.
    spec = importlib.util.spec_from_file_location("benchmark_models", ROOT / "benchmarks/models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.resnet()


@pytest.mark.parametrize("label", ["mnist_single", "mnist_multi", "resnet50"])
def test_upstream_layer_set_output_is_byte_identical_to_the_pinned_hashes(tmp_path, label):
    model = _resnet50() if label == "resnet50" else ROOT / "examples/mnist_cnn/mnist_cnn.onnx"
    policy = "single" if label == "mnist_single" else "multi"
    result = mrvl_convert.convert(model, tmp_path / label, policy=policy, layer_set=UPSTREAM)
    got = {(label, p.name): hashlib.sha256(p.read_bytes()).hexdigest() for p in result.files
           if p.name.endswith(("-nodes.json", "-consts.json"))}
    assert got == {k: v for k, v in PINNED.items() if k[0] == label}

"""The --draw page's embedded graph data stays one script element whatever the node names are."""
from __future__ import annotations

import json
from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert

from support.html_scripts import Scripts

NODE_NAMES = ["</script><script>alert(1)</script>", "<!--<script>", "&amp;", "a\u2028b\u2029c",
              "<![CDATA[x]]>"]
TENSOR_NAME = "</SCRIPT >"
DATA_TAG = '<script type="application/json" id="graph-data">'


def hostile_model() -> onnx.ModelProto:
    """Conv, Relu (Mrvl), Sin (CPU), Relu (Mrvl), each named by an attacker; one tensor too."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name=NODE_NAMES[0], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], [TENSOR_NAME], name=NODE_NAMES[1]),
             helper.make_node("Sin", [TENSOR_NAME], ["s"], name=NODE_NAMES[2]),
             helper.make_node("Relu", ["s"], ["t"], name=NODE_NAMES[3]),
             helper.make_node("Identity", ["t"], ["y"], name=NODE_NAMES[4])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("draw") / "m"
    mrvl_convert.convert(hostile_model(), out, name="m", draw=True)
    return (out / "m.html").read_text(encoding="utf-8")


def asset(name: str) -> str:
    return resources.files("mrvl_convert.viz").joinpath(name).read_text(encoding="utf-8")


def test_the_page_has_its_own_three_scripts_and_no_other(page):
    parser = Scripts()
    parser.feed(page)
    parser.close()
    attrs = [a for a, _ in parser.found]
    assert attrs == [{"type": "application/json", "id": "graph-data"}, {}, {}]
    assert [text for _, text in parser.found[1:]] == [asset("elk.bundled.js"), asset("page.js")]


def test_the_data_reads_back_as_the_original_names(page):
    parser = Scripts()
    parser.feed(page)
    data = json.loads(parser.found[0][1])
    named = [n["name"] for n in data["nodes"] if n["op"] not in ("input", "output")]
    assert named == NODE_NAMES
    tensors = {t for n in data["nodes"] for t, _ in n.get("outputs", [])}
    assert TENSOR_NAME in tensors


# (state, what is read, next state): "<!--" escapes, "<script" inside that escapes doubly (where
# "</script" no longer ends the element), "-->" goes back.
_MOVES = (("data", "<!--", "escaped"), ("escaped", "<script", "double"),
          ("double", "</script", "escaped"), ("escaped", "-->", "data"), ("double", "-->", "data"))


def html5_script_end(page: str, start: int) -> int:
    """Where a browser ends a script element whose text starts at ``start``: the index of its
    end tag, by HTML5's script data states (html.parser does not model the escaped ones)."""
    low, state, i = page.lower(), "data", start
    while i < len(low):
        if state in ("data", "escaped") and _tag_at(low, i, "</script"):
            return i
        step = next(((to, len(mark)) for at, mark, to in _MOVES
                     if state == at and (_tag_at(low, i, mark) if mark.endswith("script")
                                         else low.startswith(mark, i))), None)
        state, i = (step[0], i + step[1]) if step else (state, i + 1)
    return -1


def _tag_at(low: str, i: int, tag: str) -> bool:
    end = i + len(tag)
    return low.startswith(tag, i) and end < len(low) and low[end] in " \t\n\f\r/>"


@pytest.mark.parametrize("text,end", [("a</script>", 1), ("a</script", -1),
                                      ("<!--<script></script>b</script>", 22),
                                      ("<!--<script>--></script>", 15), ("<!--</script>", 4)])
def test_the_html5_model_ends_script_data_as_browsers_do(text, end):
    assert html5_script_end(text, 0) == end


def test_a_browser_ends_the_data_where_the_page_means_it_to(page):
    start = page.index(DATA_TAG) + len(DATA_TAG)
    assert html5_script_end(page, start) == page.index("</script>\n<script>", start)


def test_the_data_has_no_character_html_reads_inside_a_script(page):
    """'<' (a '<!--' would keep the element open past its end tag, a '</script' would end it
    early), '>' and '&' appear in the data only as \\u escapes; so do U+2028 and U+2029."""
    start = page.index(DATA_TAG) + len(DATA_TAG)
    text = page[start:page.index("</script>", start)]
    assert json.loads(text)["model"] == "m"
    for character in ("<", ">", "&", "\u2028", "\u2029"):
        assert character not in text
    for escape in ("\\u003c", "\\u003e", "\\u0026", "\\u2028", "\\u2029"):
        assert escape in text

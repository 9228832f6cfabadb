"""Constant folding is bounded (memory, time) and quiet (frontend/folding.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.folding import FoldBounds, fold_constants

PYTHON = sys.executable
CLI = os.path.join(os.path.dirname(PYTHON), "mrvl-convert")


def _model(nodes, inputs, outputs, inits=(), name="fold"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _huge_constant_model() -> onnx.ModelProto:
    """A few hundred bytes that ask for 1 GiB: ConstantOfShape([16384, 16384]) -> ReduceSum."""
    shape = numpy_helper.from_array(np.array([16384, 16384], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
             helper.make_node("Add", ["x", "total"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [shape])


def _failing_fold_model() -> onnx.ModelProto:
    """A constant Gather out of bounds: onnxruntime cannot fold it (graphsurgeon warns)."""
    data = numpy_helper.from_array(np.arange(4, dtype=np.float32), "data")
    index = numpy_helper.from_array(np.array([7], np.int64), "index")
    nodes = [helper.make_node("Gather", ["data", "index"], ["g"]),
             helper.make_node("Add", ["x", "g"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [data, index])


def _peak_rss_mib(script: str, cwd) -> tuple:
    """Run ``script`` in a grandchild; its peak RSS (a fresh child measures only it) and output."""
    wrapper = textwrap.dedent(f"""
        import resource, subprocess, sys
        done = subprocess.run([sys.executable, "-c", {script!r}], capture_output=True, text=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(repr((done.returncode, peak, done.stdout, done.stderr)))
    """)
    out = subprocess.run([PYTHON, "-c", wrapper], capture_output=True, text=True, cwd=cwd,
                         check=True)
    code, peak_kib, stdout, stderr = eval(out.stdout.strip())  # our own repr
    return code, peak_kib / 1024, stdout, stderr


def test_a_huge_constant_is_not_folded_and_memory_stays_bounded(tmp_path):
    path = tmp_path / "huge.onnx"
    onnx.save(_huge_constant_model(), str(path))
    assert path.stat().st_size < 1024
    script = (f"import mrvl_convert; mrvl_convert.convert({str(path)!r}, "
              f"{str(tmp_path / 'out')!r})")
    code, peak_mib, stdout, stderr = _peak_rss_mib(script, tmp_path)
    assert code == 0, stderr
    assert peak_mib < 600, f"peak RSS {peak_mib:.0f} MiB"
    assert stdout == "" and stderr == ""
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    node = next(n for n in report["nodes"] if n["op_type"] == "ConstantOfShape")
    assert node["placement"] == "cpu"
    assert "not computed at conversion time" in node["canonical"]
    assert "1024 MiB" in node["canonical"]


def test_folding_prints_nothing_unless_verbose(tmp_path):
    path = tmp_path / "gather.onnx"
    onnx.save(_failing_fold_model(), str(path))
    quiet = subprocess.run([CLI, str(path), "-o", str(tmp_path / "q"), "-q", "-j", "1"],
                           capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "" and quiet.stderr == ""
    verbose = subprocess.run([CLI, str(path), "-o", str(tmp_path / "v"), "-q", "-v", "-j", "1"],
                             capture_output=True, text=True)
    assert verbose.returncode == 0, verbose.stderr
    assert "Inference failed" in verbose.stdout + verbose.stderr
    assert "MRVL_CONVERT_VERBOSE" not in os.environ


def test_convert_prints_nothing_on_a_model_folding_cannot_compute(tmp_path, capfd):
    mrvl_convert.convert(_failing_fold_model(), tmp_path / "out")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_ordinary_constant_subgraphs_are_still_folded(tmp_path):
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float16), "w16")
    nodes = [helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    result = mrvl_convert.convert(model, tmp_path / "out")
    cast = next(n for n in result.placements if n["op_type"] == "Cast")
    assert cast["placement"] == "removed" and "constant folding" in cast["reason"]
    assert result.placement(next(n["name"] for n in result.placements
                                 if n["op_type"] == "Conv"))["placement"] == "mrvl"


def test_bounds_grow_with_the_models_own_weights():
    small = gs.Graph(inputs=[], outputs=[])
    assert FoldBounds.of(small) == FoldBounds(64 << 20, 256 << 20)
    weight = gs.Constant("w", np.zeros((5 << 20,), np.float32))  # 20 MiB
    node = gs.Node("Relu", inputs=[weight], outputs=[gs.Variable("r", np.float32, [5 << 20])])
    bounds = FoldBounds.of(gs.Graph(nodes=[node], outputs=node.outputs))
    assert bounds.tensor_bytes == 80 << 20 and bounds.total_bytes == 256 << 20


def _constant_of_shape_graph(count: int, elements: int) -> gs.Graph:
    nodes, outs = [], []
    for k in range(count):
        shape = gs.Constant(f"s{k}", np.array([elements], np.int64))
        out = gs.Variable(f"c{k}", np.float32, [elements])
        summed = gs.Variable(f"r{k}", np.float32, [1])
        x = gs.Variable(f"x{k}", np.float32, [1])
        nodes += [gs.Node("ConstantOfShape", inputs=[shape], outputs=[out]),
                  gs.Node("ReduceSum", inputs=[out], outputs=[summed], attrs={"keepdims": 1}),
                  gs.Node("Add", inputs=[x, summed], outputs=[gs.Variable(f"y{k}", np.float32,
                                                                          [1])])]
        outs.append((x, nodes[-1].outputs[0]))
    for k, node in enumerate(nodes):
        node.name = f"{node.op}_{k}"
    graph = gs.Graph(nodes=nodes, inputs=[x for x, _ in outs], outputs=[y for _, y in outs],
                     opset=13)
    return graph.toposort()


def test_the_total_budget_stops_folding_once_spent():
    graph = _constant_of_shape_graph(3, 150)  # 600 bytes per ConstantOfShape
    refused = fold_constants(graph, bounds=FoldBounds(tensor_bytes=1000, total_bytes=1300))
    remaining = [n.op for n in graph.nodes]
    assert remaining.count("ConstantOfShape") == 1
    assert len(refused) == 1 and "folding this model may create" in next(iter(refused.values()))


def test_the_per_tensor_bound_names_the_size():
    graph = _constant_of_shape_graph(1, 1000)  # 4000 bytes
    refused = fold_constants(graph, bounds=FoldBounds(tensor_bytes=1000, total_bytes=10 ** 6))
    assert list(refused) == ["ConstantOfShape_0"]
    assert "4000 bytes" in refused["ConstantOfShape_0"]
    assert [n.op for n in graph.nodes].count("ReduceSum") == 1  # its consumer stays too


def test_a_costly_constant_matmul_is_left_to_cpu(tmp_path):
    a = numpy_helper.from_array(np.ones((2048, 2048), np.float32), "a")
    b = numpy_helper.from_array(np.ones((2048, 2048), np.float32), "b")
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"]),
             helper.make_node("ReduceSum", ["ab"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [a, b])
    result = mrvl_convert.convert(model, tmp_path / "out")
    matmul = next(n for n in result.placements if n["op_type"] == "MatMul")
    assert matmul["placement"] == "cpu" and "multiply-accumulates" in matmul["canonical"]


def test_concurrent_conversions_restore_graphsurgeon_logger(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    before = gs.logger.G_LOGGER.severity
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda k: mrvl_convert.convert(_failing_fold_model(), tmp_path / f"o{k}"),
                      range(4)))
    assert gs.logger.G_LOGGER.severity == before

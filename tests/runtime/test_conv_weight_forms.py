"""Conv2D layers whose weights have structure the graph engine uses: a channel shuffle (a 1x1
kernel copying one channel per output) runs as a gather with nothing to round, and a grouped
convolution written with groups=1 (zero outside its diagonal blocks, as ShuffleNet's grouped
convolutions are lowered) runs as a grouped Conv. Both give what the per-layer path gives."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.kernels.conv_weights import channel_copies, diagonal_groups
from mrvl_convert.runtime import MrvlSimulator
from mrvl_convert.runtime import graph_engine
from mrvl_convert.core.artifact import decode_consts, read_json
from support.jsonbuild import SubgraphBuilder, conv2d, to_nhwc, write_pair


def _block_diagonal(rng, o: int, i: int, groups: int, k: int = 3) -> np.ndarray:
    w = np.zeros((o, i, k, k), np.float32)
    og, ig = o // groups, i // groups
    for g in range(groups):
        w[g * og:(g + 1) * og, g * ig:(g + 1) * ig] = rng.standard_normal((og, ig, k, k))
    return w


def test_structure_is_read_from_the_weights():
    rng = np.random.default_rng(0)
    ohwi = _block_diagonal(rng, 12, 6, 3).transpose(0, 2, 3, 1)
    assert diagonal_groups(ohwi) == 3
    ohwi[0, 0, 0, 5] = 0.5  # one product across blocks: no groups
    assert diagonal_groups(ohwi) == 1
    shuffle = np.eye(6, dtype=np.float32)[[0, 3, 1, 4, 2, 5]].reshape(6, 1, 1, 6)
    np.testing.assert_array_equal(channel_copies(shuffle), [0, 3, 1, 4, 2, 5])
    assert channel_copies(shuffle * 2) is None
    assert channel_copies(np.ones((6, 1, 1, 6), np.float32)) is None


def _model(weight: np.ndarray, shuffle: np.ndarray):
    rng = np.random.default_rng(1)
    b = SubgraphBuilder()
    x = to_nhwc(b, b.input("x", (1, 6, 8, 8)))
    y = conv2d(b, x, weight, rng.standard_normal(weight.shape[0]).astype(np.float32), (8, 8),
               pads=(1, 1, 1, 1), source_nodes=["Conv_1"])
    z = conv2d(b, y, shuffle, None, (8, 8), source_nodes=["Shuffle_2"])
    return b.docs([z])


def _emitted(compiled, consts_path: str):
    """Per layer (by its first source node), the ONNX nodes of its graph-engine form."""
    consts = decode_consts(consts_path, read_json(consts_path, "Constants-JSON", max_bytes=None))
    forms = {}
    for step in compiled.steps:
        emitter = graph_engine._Emitter(consts, set())
        if step.spec.source_nodes and emitter.add(step):
            forms[step.spec.source_nodes[0]] = emitter.builder.nodes
    return forms


@pytest.mark.parametrize("groups", [2, 3])
def test_grouped_and_shuffle_forms_match_the_per_layer_path(tmp_path, groups):
    rng = np.random.default_rng(groups)
    weight = _block_diagonal(rng, 6, 6, groups)
    order = np.arange(6).reshape(groups, -1).T.reshape(-1)   # a channel shuffle
    shuffle = np.eye(6, dtype=np.float32)[order].reshape(6, 6, 1, 1)
    paths = write_pair(str(tmp_path), "t", *_model(weight, shuffle))
    compiled = MrvlSimulator().compile(*paths)
    forms = _emitted(compiled, paths[1])
    [conv] = [n for n in forms["Conv_1"] if n.op_type == "Conv"]
    assert [a.i for a in conv.attribute if a.name == "group"] == [groups]
    assert "Gather" in [n.op_type for n in forms["Shuffle_2"]]
    assert compiled.steps[-1].kernel.exact  # the shuffle moves values: nothing to round
    x = rng.standard_normal((1, 6, 8, 8)).astype(np.float32)
    [got] = compiled.run({"x": x})
    [want] = MrvlSimulator(engine="layers").compile(*paths).run({"x": x})
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
    assert bool((np.abs(got - want) <= ulp).all())
    # The per-layer path's shuffle is the conv's output with its channels reordered, exactly.
    trace = []
    MrvlSimulator(engine="layers").compile(*paths).execute([x], [], trace=trace)
    conv_out, shuffled = trace[-2][1], trace[-1][1]
    np.testing.assert_array_equal(shuffled, conv_out[..., order])

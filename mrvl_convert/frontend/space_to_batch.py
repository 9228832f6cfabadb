"""A space-to-batch convolution (TensorFlow's atrous Conv) as one Conv with dilations.

TensorFlow computes a dilated convolution as SpaceToBatchND -> Conv -> BatchToSpaceND: the
image, zero padded, is cut into its ``bh x bw`` phase grids, stacked along the batch axis
(batch ``bh bw N``), convolved without dilation, and put back, the pad cropped. tf2onnx writes
the two data movements as Pad, Transpose, SpaceToDepth, DepthToSpace, Slice, Reshape and
Squeeze/Unsqueeze chains (which ones depends on its version and the shapes); the accelerator's
batch limit and its layers cut the model there. Whatever the spelling, the chains only move
elements, so they are recognised by what they move (``index_moves.py``): the chain from a
4-D tensor X to the Conv's input must copy exactly SpaceToBatch's elements for one block
``(bh, bw)``, one pad and one layout of X, and the chain from the Conv's output to a 4-D
tensor Y exactly BatchToSpace's and a crop, in one layout of Y. Per-element ops inside the
second chain (a bias Add, BatchNormalization as Mul/Add, Relu) whose constants are the same for
every element of an output channel move with it.

In an int8 (QDQ) model quantize_static writes a pair after most nodes of both chains: a
per-tensor QuantizeLinear / DequantizeLinear is a per-element step that commutes with a move
(``qdq_steps.py``), so both chains are read through them and they are applied again, in their
order, on the moved tensor (before the crop where they lead the second chain, so the Conv's
own pair follows it); a DequantizeLinear followed by a QuantizeLinear of the same parameters
is dropped (the same integers). The int8 weight is a DequantizeLinear of a constant, and a
per-channel op's operand may be one (its integers laid out per channel, the same scale). An
int8 result that needs a layout is laid out between a DequantizeLinear and a QuantizeLinear of
its own parameters (the same integers), where an int8 layer reads it.

Requires: static shapes; the Conv 2-D, stride 1, dilation 1, constant (or int8) weight.
Ensures: Y is computed as ``[Transpose] -> Conv(dilations=(bh, bw), pads) -> [Slice] ->
moved per-element ops -> [Transpose]`` from X (the Conv keeps its name; a Transpose that only
moves unit axes is written as a Reshape); the pads are the SpaceToBatch pad plus the inner
Conv's pads times the block, less the crop; a pad that comes out negative is a Slice of the
Conv's output. A form that does not match exactly (another block, pads or crops that do not
line up, a per-element op whose constant varies within a channel, a chain another node reads
midway) is left as it is: nothing else changes.

Bound: every output of the Conv is the same sum of the same n = (C / group) kh kw products
(and its bias) as before (the zeros the pads add are the same zeros); only the order of the
additions may differ, and two float32 sums of the same n + 1 terms are at most
``2 n u sum |x w|`` apart (u = 2**-24). The moved per-element ops are the same ops on values
that close (a Mul by s scales the difference by |s|), each adding at most one rounding of its
own output. The tests compare onnxruntime's outputs before and after within this
(``tests/frontend/test_space_to_batch.py``, ``tests/system/test_fuzz_space_to_batch.py``).
In an int8 model the pairs are the same functions of the same elements (exact); the Conv reads
the same int8 values, and its sum, within the bound above, is quantized by its own pair: a
result a step apart only where the two float sums straddle a rounding midpoint. onnxruntime
(op by op, and its int8 kernels) measured bit-equal: its im2col gathers a dilated window in
the phase grid's order (``tests/frontend/test_int8_atrous.py``,
``tests/system/test_fuzz_i8atrous.py``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, conv_pads, is_const, static_shape
from mrvl_convert.core.qdq_grid import per_tensor_qdq
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.dilated_nodes import Adder, laid_out_int8, moved_again
from mrvl_convert.frontend.index_moves import ABSENT, is_move, move
from mrvl_convert.frontend.rank_ops import dequantized
from mrvl_convert.frontend.qdq_steps import without_round_trips
from mrvl_convert.frontend.sequence_ops import kept_names

_MAX_ELEMENTS = 1 << 23  # index arrays beyond this are not built (the form is left as is)
_INDEX = np.int32  # enough for _MAX_ELEMENTS, half the memory traffic of int64
_MAX_CHAIN = 32  # an int8 model's chain has a QDQ pair after most moves
_UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid",
                    "HardSwish", "Softplus", "Neg", "Abs", "Clip"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "PRelu", "Max", "Min"})


@dataclass(frozen=True)
class _Split:
    """SpaceToBatch of X: X.transpose(to_nchw) is [N, C, H, W], padded by pads, cut in blocks."""
    source: gs.Tensor
    to_nchw: Tuple[int, ...]
    block: Tuple[int, int]
    pads: Tuple[int, int]            # top, left of the padded grid (inner Conv pads included)
    batch: int
    steps: Tuple[gs.Node, ...] = ()  # the chain's per-tensor Q/DQ nodes, in their order


@dataclass
class _Join:
    """BatchToSpace of the Conv's output Z, cropped at start, as Y.transpose(to_nchw)."""
    result: gs.Tensor
    to_nchw: Tuple[int, ...]
    start: Tuple[int, int]
    size: Tuple[int, int]
    nodes: List[gs.Node]
    per_channel: List[Tuple[gs.Node, Optional[np.ndarray]]] = field(default_factory=list)


def rewrite_space_to_batch(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every space-to-batch Conv of ``graph`` in place, recording it in ``done``; True
    when one was (the caller then cleans up and sorts the graph)."""
    names, kept, changed = Names(graph), kept_names(graph), False
    for conv in [n for n in graph.nodes if n.op == "Conv"]:
        inner = _inner_pads(conv)
        split = _split(conv, inner) if inner is not None else None
        join = _join(conv, split, kept) if split is not None else None
        if join is not None:
            _as_dilated(graph, conv, split, join, names, done)
            changed = True
    return changed


def _inner_pads(conv: gs.Node) -> Optional[List[int]]:
    x, z = conv.inputs[0], conv.outputs[0]
    weight = conv.inputs[1] if len(conv.inputs) > 1 else None
    shape, out = static_shape(x), static_shape(z)
    if weight is None or _kernel(weight) is None or shape is None or out is None or len(shape) != 4 \
            or x.dtype is None or np.dtype(x.dtype) != np.float32 or len(conv.outputs) != 1 \
            or any(int(v) != 1 for v in attr(conv, "strides", [1, 1])
                   + attr(conv, "dilations", [1, 1])):
        return None
    kernel = _kernel(weight)
    return conv_pads(conv, shape, kernel, [1, 1], [1, 1], out)


def _kernel(weight: gs.Tensor) -> Optional[List[int]]:
    """The kernel size of a constant weight, or of an int8 one (a DequantizeLinear of one)."""
    if is_const(weight):
        return list(const_value(weight).shape[2:])
    dq = dequantized(weight)
    return list(const_value(dq.inputs[0]).shape[2:]) if dq is not None else None


def _split(conv: gs.Node, inner: List[int]) -> Optional[_Split]:
    """The farthest tensor X whose chain to the Conv's input is a SpaceToBatch of X."""
    target = conv.inputs[0]
    if static_shape(target)[0] < 2:  # no phase grids in its batch: the common Conv, at no cost
        return None
    chain: List[gs.Node] = []
    tensor = target
    candidates = []
    while len(tensor.inputs) == 1 and _passes(tensor.inputs[0]) and len(chain) < _MAX_CHAIN:
        chain.insert(0, tensor.inputs[0])
        tensor = tensor.inputs[0].inputs[0]
        candidates.append((tensor, list(chain)))
    for source, nodes in reversed(candidates):
        if not any(is_move(n) for n in nodes):
            # Q/DQ steps alone move nothing: the float twin has no chain here and is not
            # rewritten (a batch of 1x1 images or rows fits any block: ICLabelNet, CenterFace)
            continue
        moved = _run(source, nodes)
        split = _as_split(source, moved, inner) if moved is not None else None
        if split is not None:
            return replace(split, steps=tuple(n for n in nodes if per_tensor_qdq(n)))
    return None


def _passes(node: gs.Node) -> bool:
    """A data movement, or a per-tensor Q/DQ: a per-element step that commutes with one."""
    return is_move(node) or per_tensor_qdq(node)


def _run(source: gs.Tensor, nodes: Sequence[gs.Node]) -> Optional[np.ndarray]:
    shape = static_shape(source)
    if shape is None or int(np.prod(shape)) > _MAX_ELEMENTS:
        return None
    array = np.arange(int(np.prod(shape)), dtype=_INDEX).reshape(shape)
    for node in nodes:
        array = array if per_tensor_qdq(node) else move(node, array)
        if array is None or list(array.shape) != static_shape(node.outputs[0]):
            return None
    return array


def _blocks(count: int) -> List[Tuple[int, int]]:
    return [(bh, count // bh) for bh in range(1, count + 1) if count % bh == 0 and count > 1]


def _as_split(source: gs.Tensor, moved: np.ndarray, inner: List[int]) -> Optional[_Split]:
    shape = static_shape(source)
    if len(shape) != 4 or moved.ndim != 4 or 0 in shape:
        return None
    index = np.arange(int(np.prod(shape)), dtype=_INDEX).reshape(shape)
    where = np.full(index.size, -1, np.int64)  # each element's flat position in ``moved``
    flat = moved.reshape(-1)
    copied = flat != ABSENT
    where[flat[copied]] = np.flatnonzero(copied)
    for perm in itertools.permutations(range(4)):
        image = index.transpose(perm)  # [N, C, H, W]
        n, c = image.shape[:2]
        if c != moved.shape[1] or moved.shape[0] % n:
            continue
        for block in _blocks(moved.shape[0] // n):
            pads = _split_pads(image, moved, where, block)
            if pads is not None:
                top, left = pads[0] + inner[0] * block[0], pads[1] + inner[1] * block[1]
                return _Split(source, tuple(perm), block, (top, left), n)
    return None


def _split_pads(image: np.ndarray, moved: np.ndarray, where: np.ndarray,
                block: Tuple[int, int]) -> Optional[Tuple[int, int]]:
    """The top and left pad for which ``moved`` is SpaceToBatch(image), or None."""
    (bh, bw), (n, c, height, width) = block, image.shape
    h, w = moved.shape[2:]
    position = int(where[image[0, 0, 0, 0]])
    if position < 0:
        return None
    k, ch, y, x = (int(v) for v in np.unravel_index(position, moved.shape))
    phase = k // n
    top, left = y * bh + phase // bw, x * bw + phase % bw
    bottom, right = h * bh - height - top, w * bw - width - left
    if ch or k % n or min(bottom, right) < 0:
        return None
    padded = np.pad(image, [(0, 0), (0, 0), (top, bottom), (left, right)],
                    constant_values=ABSENT)
    expected = padded.reshape(n, c, h, bh, w, bw).transpose(3, 5, 0, 1, 2, 4)
    return (top, left) if np.array_equal(expected.reshape(moved.shape), moved) else None


def _join(conv: gs.Node, split: _Split, kept: set) -> Optional[_Join]:
    """The farthest tensor Y whose chain from the Conv's output is a BatchToSpace and crop."""
    tensor, chain, candidates = conv.outputs[0], [], []
    while len(tensor.outputs) == 1 and tensor.name not in kept and len(chain) < _MAX_CHAIN:
        reader = tensor.outputs[0]
        if not (is_move(reader) or _moving_input(reader) is not None) \
                or len(reader.outputs) != 1:
            break
        chain.append(reader)
        tensor = reader.outputs[0]
        candidates.append((tensor, list(chain)))
    for result, nodes in reversed(candidates):
        join = _as_join(conv.outputs[0], result, nodes, split)
        if join is not None:
            return join
    return None


def _moving_input(node: gs.Node) -> Optional[int]:
    """Which input of a per-element node carries the data (the others constant), or None."""
    if per_tensor_qdq(node):
        return 0
    variables = [i for i, t in enumerate(node.inputs) if t.name and _operand(t) is None]
    if len(variables) != 1 or node.inputs[variables[0]].dtype is None:
        return None
    if node.op in _UNARY and variables == [0]:
        return 0 if all(_operand(t).size == 1 for t in node.inputs[1:] if t.name) else None
    if node.op == "PRelu" and variables != [0]:  # the slope is no operand order can swap
        return None
    return variables[0] if node.op in _BINARY and len(node.inputs) == 2 else None


def _operand(tensor: gs.Tensor) -> Optional[np.ndarray]:
    """A constant operand's value: a constant's, or the integers of an int8 model's per-tensor
    DequantizeLinear of a constant (its one scale: equal integers, equal values); else None."""
    if is_const(tensor):
        return const_value(tensor)
    dq = dequantized(tensor)
    return const_value(dq.inputs[0]) if dq is not None and per_tensor_qdq(dq) else None


def _as_join(z: gs.Tensor, result: gs.Tensor, nodes: List[gs.Node], split: _Split
             ) -> Optional[_Join]:
    zshape = static_shape(z)
    array, per_channel = _run_joined(z, nodes)
    shape = static_shape(result)
    if array is None or shape is None or len(shape) != 4:
        return None
    (bh, bw), n, outs = split.block, split.batch, zshape[1]
    full = np.arange(int(np.prod(zshape)), dtype=_INDEX).reshape(bh, bw, n, outs, *zshape[2:])
    full = full.transpose(2, 3, 4, 0, 5, 1).reshape(n, outs, zshape[2] * bh, zshape[3] * bw)
    for perm in itertools.permutations(range(4)):
        image = array.transpose(perm)
        if image.shape[:2] != (n, outs):
            continue
        if image[0, 0, 0, 0] == ABSENT:
            continue
        k, channel, y, x = (int(v) for v in np.unravel_index(int(image[0, 0, 0, 0]), zshape))
        if channel or k % n:  # the first element is no first sample's first channel
            continue
        top, left = y * bh + k // n // bw, x * bw + k // n % bw
        height, width = image.shape[2:]
        if np.array_equal(full[:, :, top:top + height, left:left + width], image):
            return _Join(result, tuple(perm), (top, left), (height, width), nodes, per_channel)
    return None


def _run_joined(z: gs.Tensor, nodes: List[gs.Node]):
    """The chain run on Z's indices, and each per-element node with its constant per output
    channel (None for a unary op); (None, []) when a constant varies within a channel."""
    zshape = static_shape(z)
    if int(np.prod(zshape)) > _MAX_ELEMENTS:
        return None, []
    array = np.arange(int(np.prod(zshape)), dtype=_INDEX).reshape(zshape)
    per_channel = []
    for node in nodes:
        if is_move(node):
            array = move(node, array)
            if array is None or list(array.shape) != static_shape(node.outputs[0]):
                return None, []
            continue
        values = _channel_values(node, array, zshape)
        if values is False:
            return None, []
        per_channel.append((node, values))
    return array, per_channel


def _channel_values(node: gs.Node, array: np.ndarray, zshape: List[int]):
    """The per-element node's constant as one value per channel of Z, None when it has none,
    False when it is no per-channel op on ``array`` (a pad's zero or a constant that varies)."""
    if static_shape(node.outputs[0]) != list(array.shape) or (array == ABSENT).any():
        return False
    if node.op in _UNARY or per_tensor_qdq(node):
        return None
    operand = node.inputs[1 - _moving_input(node)]
    const = _operand(operand)
    if not (np.issubdtype(const.dtype, np.floating) or not is_const(operand)):
        return False
    try:
        spread = np.broadcast_to(const, array.shape)
    except ValueError:
        return False
    channel = (array // (zshape[2] * zshape[3])) % zshape[1]
    values = np.zeros(zshape[1], dtype=const.dtype)
    values[channel.reshape(-1)] = spread.reshape(-1)
    return values if np.array_equal(values[channel], spread) else False


def _as_dilated(graph: gs.Graph, conv: gs.Node, split: _Split, join: _Join, names: Names,
                done: Rewrites) -> None:
    shape = static_shape(split.source)
    n, _, height, width = (shape[a] for a in split.to_nchw)
    kh, kw = _kernel(conv.inputs[1])
    (bh, bw), (ho, wo), outs = split.block, join.size, static_shape(conv.outputs[0])[1]
    top, left = split.pads[0] - join.start[0], split.pads[1] - join.start[1]
    pads = [top, left, ho + (kh - 1) * bh - height - top, wo + (kw - 1) * bw - width - left]
    steps = {id(node) for node in without_round_trips([n for n, _ in join.per_channel])}
    moved = [(node, list(node.inputs), _moving_input(node), values, node.outputs[0].dtype)
             for node, values in join.per_channel if id(node) in steps]  # before the cut
    for node in join.nodes:
        node.inputs.clear()
        node.outputs.clear()
        done.merged[node.name] = conv.name
    add = Adder(graph, names, done, conv.name)
    x = add.steps(add.permuted(split.source, split.to_nchw), without_round_trips(split.steps))
    kept = [max(p, 0) for p in pads]
    out = gs.Variable(names.fresh(f"{conv.name}_dilated"), dtype=np.float32, shape=[
        n, outs, height + kept[0] + kept[2] - (kh - 1) * bh,
        width + kept[1] + kept[3] - (kw - 1) * bw])
    inputs = [x] + list(conv.inputs[1:])
    conv.inputs.clear()
    conv.inputs.extend(inputs)
    conv.outputs.clear()
    conv.outputs.append(out)
    conv.attrs.pop("auto_pad", None)
    conv.attrs.update(dilations=[bh, bw], strides=[1, 1], pads=kept, kernel_shape=[kh, kw])
    add.last = conv
    # an int8 Conv's own output pairs first: the crop after them, on its quantized output
    lead = next((i for i, m in enumerate(moved) if not per_tensor_qdq(m[0])), len(moved))
    for step in moved[:lead]:
        out = moved_again(add, step, out, static_shape(out), done)
    if min(pads) < 0:  # the crop reaches inside the image: cut the Conv's output
        begin = [max(-pads[0], 0), max(-pads[1], 0)]
        out = add.node("Slice", [out, add.ints(begin), add.ints([begin[0] + ho, begin[1] + wo]),
                                 add.ints([2, 3])], [n, outs, ho, wo])
    for step in moved[lead:]:
        out = moved_again(add, step, out, [n, outs, ho, wo], done)
    perm = tuple(int(a) for a in np.argsort(join.to_nchw))
    if moved and moved[-1][0].op == "QuantizeLinear" and list(perm) != sorted(perm):
        out, perm = laid_out_int8(add, out, perm, moved[-1])
    add.finish(out, perm, join.result)
    done.rewritten[conv.name] = (f"a space-to-batch Conv (block {bh}x{bw}): one Conv with "
                                 f"dilations {bh}x{bw}")

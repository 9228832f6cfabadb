"""A pre-norm residual stream scaled by a power of two, so the stream itself (not only its norms'
squares) stays inside fp16's range.

A T5 encoder's residual stream ``x_{l+1} = x_l + f_l(norm_l(x_l))`` reaches 8e4 in float32 on some
inputs, beyond fp16's 65504, although every norm's output is of order 1. Every reader of the
stream is a norm (``norm_range.py``'s forms, which are scale-invariant once their eps is scaled
too) or a residual Add, so for ``s = 2**-k`` the stream ``s*x_l`` is computed by scaling its root
(the embedding; a MatMul's at its activation input) and every branch ``f_l`` added to it by ``s`` (a branch that a MatMul makes at
its activation input, so the MatMul's own output is in range too), and each norm's eps by ``s**2``:
each norm then gives what it gave (``norm_range.py``'s identity), so every branch is unchanged,
and the stream is ``s*x_l`` exactly (a sum of scaled terms is the scaled sum, rounded alike).

The stream's k is what holds the stream itself: ``STREAM_HEADROOM`` less than the largest k its
norms were given (``verify/norm_scales.py`` brings each norm's input peak to 64; the stream's then
to at most 64 * 2**7 = 8192, 8x under 65504), and each norm whose own k is larger is scaled by the
rest alone (``norm_range.py``): one k for the whole stream would push the small early-layer
values and their squares into fp16's subnormals (T5 on 0/1 ids: 25% error at k 12).

Bound: bit-equal in float32 where no scaled value is subnormal (|value| >= 2**(k-126) for every
stream element and branch value that is not 0) and ``eps*s**2`` is normal (norm_range.py's
bound); in fp16 a stream or branch value below 2**(k-14) in magnitude is an fp16 subnormal,
within 2**(k-25) absolutely of its float32 value (the stream's peak is brought to about 8192,
so such values are over 2**26 times smaller than it). Measured on the T5 encoder (0/1 ids, random
masks): the artifact's error against the float model, 0.02-0.12 of its peak, is that of the
scaled model with every tensor rounded to fp16 (0.04-0.11): fp16's cost there, not the scale's.

The stream is found from a named norm's input: up through Adds whose other operand no norm reads
(the branch) to its root, then down from the root: every reader of every stream tensor must be a
norm of ``norm_range.py``'s forms reading it as its input or an Add (its output joins the stream,
its other operand is a branch), no stream tensor a model output, no branch a stream tensor.
Otherwise it is no stream, and ``norm_range.py`` scales the norms alone.

Requires: ``norms``: ReduceMean name -> that norm's pieces, for every norm of the graph in a form
(``norm_range.py``). Ensures: the stream scaled (a Mul after its root, one before each branch's
Add, each norm's eps a new constant), each of its norms in ``rewritten``, the Muls in ``derived``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


#: The stream is scaled this many powers of two less than its largest norm's k.
STREAM_HEADROOM = 7


@dataclass
class Stream:
    """A residual stream: its root tensor, the Add slots its branches enter by, its norms."""

    root: gs.Tensor
    branches: List[Tuple[gs.Node, int]] = field(default_factory=list)
    norms: List[str] = field(default_factory=list)


def constant_of(tensor: gs.Tensor) -> Optional[np.ndarray]:
    """A constant's value: an initializer's, or a Constant node's output's (a model as loaded:
    verify's reference is scaled as the artifact was), else None."""
    if isinstance(tensor, gs.Constant):
        return const_value(tensor)
    producer = tensor.inputs[0] if tensor.inputs else None
    if producer is not None and producer.op == "Constant" and \
            isinstance(producer.attrs.get("value"), gs.Constant):
        return const_value(producer.attrs["value"])
    return None


def _float_cast(node: gs.Node) -> bool:
    """A Cast to float32 of a float32 tensor (T5's norms read the stream through one): no-op."""
    return node.op == "Cast" and node.attrs.get("to") == 1 and \
        node.inputs[0].dtype in (None, np.float32)  # None: a model without value_info


def find_stream(key: str, norms: Mapping[str, object], outputs: Set[str]) -> Optional[Stream]:
    """The residual stream the norm ``key`` reads, or None (module docstring)."""
    slots = {id(node): name for name, norm in norms.items() for node, _ in norm.readers}
    read_by_norm = {id(norm.x) for norm in norms.values()}
    root = norms[key].x
    while root.inputs and (root.inputs[0].op == "Add" or _float_cast(root.inputs[0])):
        producer = root.inputs[0]
        streams = [producer.inputs[0]] if producer.op == "Cast" else [
            t for t in producer.inputs if id(t) in read_by_norm or _cast_read(t, read_by_norm)]
        if len(streams) != 1:
            break
        root = streams[0]
    return _down(root, norms, slots, outputs)


def _cast_read(tensor: gs.Tensor, read_by_norm: Set[int]) -> bool:
    """Read by a norm through a float Cast."""
    return any(_float_cast(r) and id(r.outputs[0]) in read_by_norm for r in tensor.outputs)


def _down(root: gs.Tensor, norms: Mapping[str, object], slots: Dict[int, str],
          outputs: Set[str]) -> Optional[Stream]:
    stream, members, pending = Stream(root), {id(root)}, [root]
    while pending:
        tensor = pending.pop()
        if tensor.name in outputs:
            return None
        for reader in tensor.outputs:
            name = slots.get(id(reader))
            if name is not None and norms[name].x is tensor:
                stream.norms.append(name)
            elif _float_cast(reader):
                if id(reader.outputs[0]) not in members:
                    members.add(id(reader.outputs[0]))
                    pending.append(reader.outputs[0])
            elif reader.op == "Add" and len(reader.inputs) == 2 and \
                    reader.inputs[0] is not reader.inputs[1]:
                index = 1 if reader.inputs[0] is tensor else 0
                stream.branches.append((reader, index))
                out = reader.outputs[0]
                if id(out) not in members:
                    members.add(id(out))
                    pending.append(out)
            else:
                return None
    # a branch that is itself the stream (x_a + x_b) would be scaled twice
    if any(id(add.inputs[i]) in members for add, i in stream.branches):
        return None
    stream.norms = sorted(set(stream.norms))
    return stream


def scale_stream(graph: gs.Graph, stream: Stream, norms: Mapping[str, Any], k: int,
                 done: Rewrites, names: Names) -> None:
    """``stream`` times ``2**-k``: its root and branches by Muls, its norms' eps by 4**-k (each
    norm's ``x`` is then the tensor it reads, so ``norm_range.py`` may scale it further)."""
    first = stream.norms[0]
    producer = stream.root.inputs[0] if stream.root.inputs else None
    if _scales_at_input(producer):  # every reader of the root is the stream's: scale it there
        producer.inputs[0] = _mul(graph, producer.inputs[0], k, first, done, names)
    else:
        scaled = _mul(graph, stream.root, k, first, done, names)
        for reader in [r for r in stream.root.outputs if r.outputs[0] is not scaled]:
            for index, tensor in enumerate(reader.inputs):
                if tensor is stream.root:
                    reader.inputs[index] = scaled
        for name in stream.norms:  # a norm of the root reads the scaled root now
            if norms[name].x is stream.root:
                norms[name].x = scaled
    for add, index in stream.branches:
        _scale_branch(graph, add, index, k, first, done, names)
    for name in stream.norms:
        norm = norms[name]
        eps = norm.eps_add.inputs[norm.eps_index]
        value = constant_of(eps)
        norm.eps_add.inputs[norm.eps_index] = gs.Constant(
            names.fresh(f"{eps.name}_range"), np.asarray(value * value.dtype.type(4.0 ** -k)))
        done.rewritten[name] = (
            f"on a residual stream scaled by 2**-{k} ({len(stream.branches)} branch(es), "
            f"{len(stream.norms)} norm(s)), eps by 2**-{2 * k}, so the stream and its squares "
            "stay inside fp16's range: exact in float32 barring underflow "
            "(frontend/residual_range.py)")


def _scale_branch(graph: gs.Graph, add: gs.Node, index: int, k: int, origin: str,
                  done: Rewrites, names: Names) -> None:
    """A branch made by a MatMul read only by the Add is scaled at the MatMul's activation
    input ((x*s) @ W = s * (x @ W), exact barring underflow): its output, which may itself pass
    fp16's range (T5's last feed-forward), is then computed in range; any other branch is
    scaled after it."""
    branch = add.inputs[index]
    producer = branch.inputs[0] if branch.inputs else None
    if _scales_at_input(producer) and list(branch.outputs) == [add]:
        producer.inputs[0] = _mul(graph, producer.inputs[0], k, origin, done, names)
        return
    if producer is not None and producer.op == "Mul" and list(branch.outputs) == [add]:
        # a * (b*s) = s * (a*b) (exact barring underflow): a dequantizing product (a dynamic
        # int8 MatMul's, in verify's reference) is then in range where it is rounded
        producer.inputs[1] = _mul(graph, producer.inputs[1], k, origin, done, names)
        return
    add.inputs[index] = _mul(graph, branch, k, origin, done, names)


def _scales_at_input(producer: Optional[gs.Node]) -> bool:
    """A MatMul of an activation: ``(x*s) @ W`` is ``s * (x @ W)`` (exact barring underflow),
    with the product itself in range."""
    return producer is not None and producer.op == "MatMul" and \
        not isinstance(producer.inputs[0], gs.Constant)


def _mul(graph: gs.Graph, tensor: gs.Tensor, k: int, origin: str, done: Rewrites,
         names: Names) -> gs.Variable:
    dtype = np.dtype(tensor.dtype) if tensor.dtype is not None else np.dtype(np.float32)
    scale = gs.Constant(names.fresh(f"{origin}_stream_scale"), np.array(2.0 ** -k, dtype))
    out = gs.Variable(names.fresh(f"{tensor.name}_stream_scaled"), dtype=tensor.dtype,
                      shape=tensor.shape)
    node = gs.Node("Mul", names.fresh(f"{origin}_stream_scale"), inputs=[tensor, scale],
                   outputs=[out])
    graph.nodes.append(node)
    done.derived[node.name] = origin
    return out

"""An ONNX model's weights moved to one external data file, as bytes the caller writes (and hashes).

The layout is onnx's own (``onnx.save_model(..., save_as_external_data=True,
all_tensors_to_one_file=True)``): every initializer of ``SIZE_THRESHOLD`` or more (by
``sys.getsizeof`` of its raw data, as onnx measures), in onnx's tensor order, back to back from
offset 0, each tensor left with its location, offset and length. Doing the writing here, not in
onnx, lets the staging writer see every byte it writes.
"""
from __future__ import annotations

import sys
from typing import Iterator

import onnx
from onnx.external_data_helper import set_external_data

SIZE_THRESHOLD = 1024


def externalize(model: onnx.ModelProto, location: str) -> Iterator[bytes]:
    """Yield the bytes of ``model``'s large initializers in file order, leaving each tensor
    external at ``location`` without its ``raw_data`` (the model is changed in place)."""
    offset = 0
    for tensor in _initializers(model.graph):
        if tensor.HasField("raw_data") and sys.getsizeof(tensor.raw_data) >= SIZE_THRESHOLD:
            raw = tensor.raw_data
            set_external_data(tensor, location, offset, len(raw))
            tensor.ClearField("raw_data")
            offset += len(raw)
            yield raw


def _initializers(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers of ``graph`` and of its subgraphs, in the order onnx writes them."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(attribute.g)
            if attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _initializers(sub)

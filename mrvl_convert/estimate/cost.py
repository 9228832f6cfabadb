"""The roofline cost of one Mrvl layer and one Mrvl stage, from its Nodes-JSON alone (an ESTIMATE).

A pure function of the artifact: layer kinds, attributes and tensor shapes come from the
Nodes-JSON (constants' shapes from the ``*_const`` attributes, or from the Constants-JSON when a
layer only names a constant). The model and its assumptions are in docs/ESTIMATE.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from mrvl_convert.errors import ArtifactError
from mrvl_convert.layers import CATALOGUE
from mrvl_convert.estimate.profile import HardwareProfile

# The MAC-array kinds: the catalogue's compute-heavy layers.
MATMUL_KINDS = frozenset(k.name for k in CATALOGUE.values() if k.compute_heavy)

_POOL_KINDS = ("Maxpool2D", "Avgpool2D")


@dataclass(frozen=True)
class LayerEstimate:
    """One layer's estimated cost. ``cycles`` >= ``compute_cycles`` and >= ``memory_cycles``."""
    name: str
    kind: str
    source_nodes: tuple
    macs: int                 # multiply-accumulates (matmul kinds) or vector operations
    weight_bytes: int
    activation_bytes: int     # inputs read plus output written, at the activation precision
    ddr_bytes: int            # what crosses DDR under the on-chip memory model
    compute_cycles: float
    memory_cycles: float
    cycles: float
    bound: str                # "compute", "memory", "overhead", or "none" (a view: no cost)
    dtype: str = "float32"    # the layer's number format: "int8" layers are costed at int8 rates

    def as_dict(self, clock_hz: float) -> Dict[str, Any]:
        return {"layer": self.name, "kind": self.kind, "source_nodes": list(self.source_nodes),
                "macs": self.macs, "weight_bytes": self.weight_bytes,
                "activation_bytes": self.activation_bytes, "ddr_bytes": self.ddr_bytes,
                "compute_cycles": round(self.compute_cycles), "memory_cycles":
                round(self.memory_cycles), "cycles": round(self.cycles),
                "microseconds": round(self.cycles / clock_hz * 1e6, 3), "bound": self.bound,
                "dtype": self.dtype}


@dataclass(frozen=True)
class StageEstimate:
    """The estimated cost of one Mrvl stage: its layers run one after the other."""
    name: str
    tiles: int
    layers: tuple
    clock_hz: float
    # Runs of the layers per stage run (the manifest's ``runs``: a batch run in chunks); the
    # layers are one run's, the stage's cycles, MACs and DDR traffic all of them.
    runs: int = 1

    @property
    def cycles(self) -> float:
        return sum(layer.cycles for layer in self.layers) * self.runs

    @property
    def microseconds(self) -> float:
        return self.cycles / self.clock_hz * 1e6

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers if layer.kind in MATMUL_KINDS) * self.runs

    @property
    def weight_bytes(self) -> int:
        return sum(layer.weight_bytes for layer in self.layers)

    @property
    def ddr_bytes(self) -> int:
        return sum(layer.ddr_bytes for layer in self.layers) * self.runs

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": "mrvl", "tiles": self.tiles,
                "cycles": round(self.cycles), "microseconds": round(self.microseconds, 3),
                "matmul_macs": self.macs, "weight_bytes": self.weight_bytes,
                "ddr_bytes": self.ddr_bytes,
                "layers": [layer.as_dict(self.clock_hz) for layer in self.layers],
                **({"runs": self.runs} if self.runs > 1 else {})}


def estimate_stage(nodes_doc: Mapping[str, Any], profile: HardwareProfile, *,
                   tiles: Optional[int] = None, name: Optional[str] = None,
                   const_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> StageEstimate:
    """Estimate one Mrvl stage from its Nodes-JSON document (a dict as written to disk).

    ``tiles`` defaults to the profile's; ``const_shapes`` maps constant names to shapes for
    layers that name a constant without giving its shape (read from the Constants-JSON).
    This is the function a partitioner calls to weigh a candidate stage by estimated time.
    """
    tiles = _check_tiles(profile, tiles)
    label = name or str(nodes_doc.get("symbol", "stage"))
    nodes = nodes_doc.get("nodes")
    if not isinstance(nodes, list):
        raise ArtifactError(f"Nodes-JSON of {label} has no node list")
    shapes = [_out_shape(node, label) for node in nodes]
    heads = {int(h[0]) for h in nodes_doc.get("heads", [])}
    layers = []
    for index, node in enumerate(nodes):
        if node.get("op") != "tvm_op":
            continue
        try:
            layers.append(_layer(node, index, nodes, shapes, heads, profile, tiles,
                                 const_shapes or {}, label))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError,
                ArithmeticError) as exc:
            # A hand-edited or foreign Nodes-JSON: the schema leaves layer attributes open.
            raise ArtifactError(f"Nodes-JSON of {label}: layer {node.get('name')!r} cannot be "
                                f"estimated: an attribute has an unexpected value ({exc})"
                                ) from None
    return StageEstimate(label, tiles, tuple(layers), profile.clock_hz)


def boundary_cycles(elements: int, profile: HardwareProfile, dtype: str = "float16") -> float:
    """The estimated cost of one tensor crossing between a Mrvl stage and a CPU stage
    (``dtype``: the tensor's, as the manifest gives it; an int8 tensor moves 1-byte elements)."""
    data = elements * profile.precision(dtype).activation_bytes_per_element
    return profile.boundary_fixed_cycles + data / profile.boundary_bytes_per_cycle


def _check_tiles(profile: HardwareProfile, tiles: Optional[int]) -> int:
    tiles = profile.tiles if tiles is None else tiles
    if not isinstance(tiles, int) or not 1 <= tiles <= profile.max_tiles:
        raise ValueError(f"tiles must be a whole number from 1 to {profile.max_tiles} "
                         f"(profile {profile.name}), not {tiles!r}")
    return tiles


def _out_shape(node: Mapping[str, Any], label: str) -> List[int]:
    try:
        return [int(d) for d in node["attrs"]["shape"][0]]
    except (KeyError, IndexError, TypeError, ValueError):
        raise ArtifactError(f"Nodes-JSON of {label}: node {node.get('name')!r} has no output "
                            "shape (attrs.shape)") from None


def _first(attrs: Mapping[str, Any], key: str, default: str = "") -> str:
    value = attrs.get(key)
    if isinstance(value, list) and value:
        return str(value[0])
    return default


def _layer(node, index, nodes, shapes, heads, profile, tiles, const_shapes, label):
    attrs = node.get("attrs", {})
    kind = _first(attrs, "layer_name", "unknown")
    inputs = [int(i[0]) for i in node.get("inputs", [])]
    out = math.prod(shapes[index])
    dtype = _first(attrs, "dtype", "float32")
    figures = profile.precision(dtype)  # int8 layers: the int8 rates and element sizes
    act = figures.activation_bytes_per_element
    in_elems = [math.prod(shapes[i]) for i in inputs]
    weight_elems, bias_elems = _const_elements(attrs, const_shapes, node.get("name"), label)
    weight_bytes = int(weight_elems * figures.weight_bytes_per_element
                       + bias_elems * figures.bias_bytes_per_element)
    activation_bytes = int((sum(in_elems) + out) * act)
    macs, padded = _work(kind, attrs, shapes[index], in_elems, out, profile)
    if kind in profile.zero_cost_kinds:
        compute = 0.0
    elif kind in MATMUL_KINDS:
        compute = padded / (figures.macs_per_cycle_per_tile * tiles * profile.efficiency_of(kind))
    else:
        compute = padded / (figures.vector_ops_per_cycle_per_tile * tiles
                            * profile.efficiency_of(kind))
    # Stage inputs arrive from DDR and stage outputs leave for it (the notebook's DMA figures).
    edge_bytes = (sum(e for i, e in zip(inputs, in_elems) if nodes[i].get("op") == "input")
                  + (out if index in heads else 0)) * act
    ddr = _ddr_bytes(weight_bytes, activation_bytes, profile, tiles) + int(edge_bytes)
    memory = ddr / profile.ddr_bytes_per_cycle
    overhead = 0.0 if kind in profile.zero_cost_kinds else profile.layer_overhead_cycles
    cycles = max(compute, memory) + overhead
    bound = ("none" if cycles == 0 else "overhead" if overhead > max(compute, memory)
             else "compute" if compute >= memory else "memory")
    return LayerEstimate(str(node.get("name")), kind, tuple(attrs.get("source_nodes", [])),
                         int(macs), weight_bytes, activation_bytes, int(ddr), compute, memory,
                         cycles, bound, dtype)


def _const_elements(attrs, const_shapes, layer, label):
    """(kernel elements, other constant elements: bias, per-channel operands) of a layer."""
    weights = bias = 0
    seen = set()
    for key, const in attrs.items():
        if isinstance(const, dict) and "shape" in const:
            seen.add(const.get("name"))
            n = math.prod(int(d) for d in const["shape"])
            if key == "kernel_const":
                weights += n
            else:
                bias += n
    for key, value in attrs.items():
        if not key.endswith("const_name") or not isinstance(value, list) or not value:
            continue
        const_name = str(value[0])
        if not const_name or const_name in seen:
            continue
        if const_name not in const_shapes:
            raise ArtifactError(f"Nodes-JSON of {label}: layer {layer!r} names constant "
                                f"{const_name!r} whose shape is in neither the Nodes-JSON nor "
                                "the Constants-JSON")
        seen.add(const_name)
        weights += math.prod(int(d) for d in const_shapes[const_name])
    return weights, bias


def _work(kind, attrs, out_shape, in_elems, out, profile):
    """(operations, operations after padding channels to the MAC array's granule)."""
    kernel = attrs.get("kernel_const")
    if kind in MATMUL_KINDS and isinstance(kernel, dict) and kernel.get("shape"):
        kshape = [int(d) for d in kernel["shape"]]
        positions = out // kshape[0]          # output elements per output channel
        if kind == "Conv2DTranspose":         # every input position meets the whole kernel
            positions = (in_elems[0] if in_elems else out) // max(kshape[-1], 1)
        g = profile.channel_granule
        padded = _ceil_to(kshape[0], g) * math.prod(kshape[1:-1]) * _ceil_to(kshape[-1], g)
        return positions * math.prod(kshape), positions * padded
    if kind == "BatchMatmul":  # no kernel: K is the last axis of input 0 (4-D, leading 1s)
        depth = int(attrs.get("data_layout_shape", ["1"])[-1])
        return out * depth, out * _ceil_to(depth, profile.channel_granule)
    if kind in _POOL_KINDS:
        window = math.prod(int(s) for s in attrs.get("pool_size", ["1"]))
        return out * window, out * window
    if kind.startswith("Global"):
        return sum(in_elems), sum(in_elems)
    ops = max([out, *in_elems]) if in_elems else out
    return ops, ops


def _ceil_to(value: int, granule: int) -> int:
    return -(-value // granule) * granule


def _ddr_bytes(weight_bytes: int, activation_bytes: int, profile: HardwareProfile,
               tiles: int) -> int:
    """DDR traffic of a layer under the on-chip memory (OCM) model.

    Weights come from DDR once per inference (-wb_pin_ocm=0). Activations stay on chip while the
    layer's weights, inputs and output fit in the OCM of the tiles in use; otherwise they are
    read and written through DDR, and weights that do not fit beside half the OCM's worth of
    activations are fetched again for every such slice of activations.
    """
    ocm = profile.ocm_bytes_per_tile * tiles
    if weight_bytes + activation_bytes <= ocm:
        return weight_bytes
    half = ocm / 2
    passes = 1 if weight_bytes <= half else max(1, math.ceil(activation_bytes / max(half, 1)))
    return int(weight_bytes * passes + activation_bytes)

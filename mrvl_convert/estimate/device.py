"""The device check: will the converted model load on one device of the hardware profile?

Every conversion runs it (report.json ``device``). Each limit is one function below whose
docstring is the rule as a user reads it (formatted with the profile's ``device`` figures), and
every limit is applied the same way: a function returns one reason per thing over its limit.
The figures are DPDK's cnxk ML driver's (drivers/ml/cnxk/cnxk_ml_io.h, docs/BOARD.md). The
on-chip memory (OCM) is not a limit: a subgraph whose weights and largest activations do not fit
spills to DDR and still loads; the ``ocm`` part says so, with the estimate's cost if it ran.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mrvl_convert.errors import ArtifactError
from mrvl_convert.estimate.cost import StageEstimate, estimate_stage
from mrvl_convert.estimate.int8_flow import int8_flow
from mrvl_convert.estimate.profile import DeviceLimits, HardwareProfile

# For a Mrvl stage: (its Nodes-JSON document, {constant name: shape}).
StageDocs = Callable[[str], Tuple[Mapping[str, Any], Mapping[str, Sequence[int]]]]


@dataclass(frozen=True)
class Subgraph:
    """What the limits look at in one Mrvl subgraph: its inputs and outputs (name, shape)."""
    name: str
    inputs: Tuple[Tuple[str, Tuple[int, ...]], ...]
    outputs: Tuple[Tuple[str, Tuple[int, ...]], ...]


@dataclass(frozen=True)
class Model:
    """A converted model as the limits see it: its Mrvl subgraphs, and itself as a whole (the
    TVM-built model the application loads has inputs and outputs too)."""
    subgraphs: Tuple[Subgraph, ...]
    whole: Subgraph
    batch: Optional[int] = None   # the model's batch (checks_shape.model_batch), if known

    @property
    def loaded(self) -> Tuple[Subgraph, ...]:
        """Everything the driver loads as a model: each subgraph, and the model itself."""
        return self.subgraphs + (self.whole,)


def model_slots(model: Model, limits: DeviceLimits) -> List[Dict[str, Any]]:
    """A device holds at most {max_models} models, and every Mrvl subgraph takes one model slot."""
    subgraphs = model.subgraphs
    if len(subgraphs) <= limits.max_models:
        return []
    return [_reason(model_slots, "max_models", None,
                    f"{len(subgraphs)} Mrvl subgraphs need {len(subgraphs)} model slots",
                    f"--max-subgraphs {limits.max_models} (the rest runs on CPU), --deny the op "
                    "types that split the model, or a rule file that takes them onto Mrvl",
                    limits)]


def inputs_outputs(model: Model, limits: DeviceLimits) -> List[Dict[str, Any]]:
    """A model (the converted model, and each of its Mrvl subgraphs) has at most
    {max_inputs_outputs} inputs and at most {max_inputs_outputs} outputs."""
    found = []
    for sub in model.loaded:
        for what, tensors in (("inputs", sub.inputs), ("outputs", sub.outputs)):
            if len(tensors) > limits.max_inputs_outputs:
                found.append(_reason(
                    inputs_outputs, "max_inputs_outputs", sub.name,
                    f"{sub.name} has {len(tensors)} {what}",
                    f"--deny the nodes where {sub.name} gathers or hands back that many tensors "
                    "(they run on CPU), or --max-subgraphs", limits))
    return found


def dims_per_shape(model: Model, limits: DeviceLimits) -> List[Dict[str, Any]]:
    """An input or output shape has at most {max_dims} dimensions."""
    return [_reason(dims_per_shape, "max_dims", sub.name,
                    f"{sub.name}'s tensor {name!r} has {len(shape)} dimensions",
                    f"--deny the node that makes {name!r}, or reshape it in the model", limits)
            for sub in model.loaded for name, shape in sub.inputs + sub.outputs
            if len(shape) > limits.max_dims]


def batch(model: Model, limits: DeviceLimits) -> List[Dict[str, Any]]:
    """A Mrvl subgraph of a model built by TVM runs at batch {max_batch}: the first dimension
    of every input and output of rank 2 or more of a Mrvl subgraph is at most {max_batch}; a
    subgraph whose batch runs in chunks (the manifest's runs: DPDK's nb_batches) counts its
    batch per run. The model's own inputs and outputs are whole tensors of one batch."""
    # Only the subgraphs: the codegen compiles a subgraph at its inputs' axis 0 (Nodes-JSON
    # batch_size), while DPDK loads a TVM-built model at batch_size 1 and sizes each of its
    # inputs and outputs as its whole shape (mvtvm_ml_model.c), whatever its axis 0 holds.
    return [_reason(batch, "max_batch", sub.name,
                    f"{sub.name}'s tensor {name!r} has batch {shape[0]}",
                    _batch_fix(model, sub.name, name, shape[0], limits), limits)
            for sub in model.subgraphs for name, shape in sub.inputs + sub.outputs
            if len(shape) >= 2 and shape[0] > limits.max_batch]


def _batch_fix(model: Model, sub: str, name: str, axis0: int, limits: DeviceLimits) -> str:
    """Converting at a smaller batch helps only where axis 0 is the model's batch."""
    if model.batch is None or model.batch > limits.max_batch:
        return (f"convert at batch {limits.max_batch} (--input-shape NAME:{limits.max_batch},"
                "...) and run the batch as several inferences")
    return (f"the model's batch is already {model.batch}: axis 0 of {name!r} ({axis0}) holds "
            "another axis (frames or time steps, attention heads, space-to-batch blocks), "
            f"which the codegen compiles as {sub}'s batch; --deny the nodes of {sub} that make "
            f"or read {name!r} (they run on CPU)")


LIMITS = (model_slots, inputs_outputs, dims_per_shape, batch)


def rule(check: Callable[..., Any], limits: DeviceLimits) -> str:
    """A limit's rule as the user reads it: its docstring with the profile's figures."""
    return " ".join((check.__doc__ or "").split()).format(**limits.as_dict())


def _reason(check: Callable[..., Any], limit: str, subgraph: Optional[str], detail: str,
            fix: str, limits: DeviceLimits) -> Dict[str, Any]:
    return {"limit": limit, "value": getattr(limits, limit), "rule": rule(check, limits),
            "subgraph": subgraph, "detail": detail, "fix": fix}


def check_device(manifest: Mapping[str, Any], stage_docs: StageDocs, profile: HardwareProfile,
                 *, estimate: Optional[Mapping[str, Any]] = None,
                 tiles: Optional[int] = None, model_batch: Optional[int] = None
                 ) -> Dict[str, Any]:
    """report.json's ``device`` section: ``fits`` (every limit met), ``reasons`` (one per
    thing over a limit), ``ocm`` (per subgraph: weights and largest activations against the
    on-chip memory of ``tiles``, default the estimate's or the profile's) and ``notes``;
    ``model_batch`` (the model's batch) words a batch reason's fix."""
    limits = profile.device
    subgraphs = tuple(_subgraph(s) for s in manifest["stages"] if s["kind"] == "mrvl")
    # A model input or output a chunked subgraph takes or gives is fed a run's batch at a time.
    runs = {t["tensor"]: int(s.get("runs", 1)) for s in manifest["stages"] if s["kind"] == "mrvl"
            for t in s["inputs"] + s["outputs"]}
    model = Model(subgraphs, Subgraph("the model",
                                      _io(manifest["model"]["inputs"], "name", runs),
                                      _io(manifest["model"]["outputs"], "name", runs)),
                  model_batch)
    reasons = [r for check in LIMITS for r in check(model, limits)]
    tiles = tiles or (estimate or {}).get("tiles") or profile.tiles
    ocm = _ocm(subgraphs, stage_docs, profile, tiles, estimate)
    notes = [f"{s['name']}: weights and largest activations ({s['resident_bytes']} bytes) do "
             f"not fit the {ocm['capacity_bytes']} bytes of OCM of {tiles} tiles: weights "
             "stream from DDR" + _spill_cost(s) for s in ocm["subgraphs"] if not s["fits"]]
    notes += ocm["not_computed"]
    section = {"profile": profile.name, "fits": not reasons, "slots": len(subgraphs),
               "limits": limits.as_dict(),
               "rules": {c.__name__: rule(c, limits) for c in LIMITS},
               "reasons": reasons, "ocm": ocm, "notes": notes}
    flow = int8_flow(manifest, stage_docs)  # Marvell's pre-quantized rules: int8 only
    if flow:
        section["int8_flow"] = flow
    return section


def _spill_cost(sub: Mapping[str, Any]) -> str:
    """What the spill costs: which layers do not fit even alone, and the estimate's time of them."""
    if not sub["layers_over"]:
        cost = (f"; each layer's own weights and activations fit (the largest, "
                f"{sub['largest_layer']}, uses {sub['largest_layer_use'] or 0:.1%} of it)")
    elif sub.get("spill_microseconds") is None:
        cost = (f"; {sub['layers_over']} layers do not fit even alone (--estimate gives "
                "their cost)")
    else:
        cost = (f"; {sub['layers_over']} layers do not fit even alone, estimated at "
                f"{sub['spill_microseconds']:.1f} us")
    if sub.get("stream_microseconds") is not None:
        cost += f"; the estimate streams the weights in {sub['stream_microseconds']:.1f} us"
    return cost + " (--quantize int8 halves the weights' bytes)"


def _io(tensors: Sequence[Mapping[str, Any]], key: str,
        runs: Optional[Mapping[str, int]] = None) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
    """(name, shape) per tensor, axis 0 divided by the runs its batch is taken in."""
    found = []
    for t in tensors:
        shape = [d if isinstance(d, int) else 0 for d in t["shape"]]
        chunks = (runs or {}).get(str(t[key]), 1)
        if shape and chunks > 1:
            shape[0] //= chunks
        found.append((str(t[key]), tuple(shape)))
    return tuple(found)


def _subgraph(stage: Mapping[str, Any]) -> Subgraph:
    runs = {t["tensor"]: int(stage.get("runs", 1)) for t in stage["inputs"] + stage["outputs"]}
    return Subgraph(stage["name"], _io(stage["inputs"], "tensor", runs),
                    _io(stage["outputs"], "tensor", runs))


def _ocm(subgraphs: Sequence[Subgraph], stage_docs: StageDocs, profile: HardwareProfile,
         tiles: int, estimate: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    capacity = int(profile.ocm_bytes_per_tile * tiles)
    costed = {s["name"]: s for s in (estimate or {}).get("stages", []) if s["kind"] == "mrvl"}
    rows, missing = [], []
    for sub in subgraphs:
        doc, shapes = stage_docs(sub.name)
        try:
            stage = estimate_stage(doc, profile, tiles=tiles, name=sub.name, const_shapes=shapes)
        except ArtifactError as exc:  # a layer kind the cost model cannot size: say so, go on
            missing.append(f"{sub.name}: OCM use not computed: {exc}")
            continue
        row = _ocm_row(stage, capacity, costed.get(sub.name))
        if sub.name in costed:  # the estimate's DDR time of streaming the weights once
            row["stream_microseconds"] = round(stage.weight_bytes / profile.ddr_bytes_per_cycle
                                               / profile.clock_hz * 1e6, 3)
        rows.append(row)
    return {"bytes_per_tile": int(profile.ocm_bytes_per_tile), "tiles": tiles,
            "capacity_bytes": capacity, "subgraphs": rows, "not_computed": missing,
            "largest_layer_use": max((r["largest_layer_use"] for r in rows
                                      if r["largest_layer_use"] is not None), default=None)}


def _ocm_row(stage: StageEstimate, capacity: int, costed: Optional[Mapping[str, Any]]
             ) -> Dict[str, Any]:
    """One subgraph against the OCM: all its weights plus its largest layer's activations
    (resident), and its largest layer's own weights and activations (what one layer needs)."""
    layers = stage.layers
    peak = max(layers, key=lambda layer: layer.activation_bytes, default=None)
    largest = max(layers, key=lambda layer: layer.weight_bytes + layer.activation_bytes,
                  default=None)
    resident = stage.weight_bytes + (peak.activation_bytes if peak else 0)
    over = {layer.name for layer in layers
            if layer.weight_bytes + layer.activation_bytes > capacity}
    largest_bytes = largest.weight_bytes + largest.activation_bytes if largest else 0
    row = {"name": stage.name, "weight_bytes": stage.weight_bytes,
           "peak_activation_bytes": peak.activation_bytes if peak else 0,
           "peak_activation_layer": peak.name if peak else None,
           "resident_bytes": resident, "fits": resident <= capacity,
           "largest_layer": largest.name if largest else None,
           "largest_layer_bytes": largest_bytes,
           "largest_layer_use": round(largest_bytes / capacity, 4) if capacity else None,
           "layers_over": len(over), "spill_microseconds": None, "stream_microseconds": None}
    if costed is not None:
        row["spill_microseconds"] = round(sum(layer["microseconds"] for layer in costed["layers"]
                                              if layer["layer"] in over), 3)
    return row


def device_row(section: Mapping[str, Any]) -> Dict[str, Any]:
    """What a batch keeps of a model's ``device`` section (summary.json's row)."""
    row = {"fits": bool(section["fits"]), "slots": int(section["slots"]),
           "max_models": int(section["limits"]["max_models"]),
           "reasons": [reason_line(r) for r in section["reasons"]]}
    if "int8_flow" in section:
        row["int8_flow"] = dict(section["int8_flow"])
    return row


def reason_line(reason: Mapping[str, Any]) -> str:
    """One reason as one line: the limit and its figure, what is over it, and what to do."""
    return f"{reason['limit']} {reason['value']}: {reason['detail']}; {reason['fix']}"


def one_device(rows: Mapping[str, Mapping[str, Any]]) -> Tuple[Dict[str, Any],
                                                               Dict[str, Dict[str, Any]]]:
    """Several models loaded on one device together (``--one-device``): their slots count
    together against the smallest ``max_models`` among them. Returns the overall verdict and
    each model's row with the shared verdict added (``rows``: model name -> ``device_row``)."""
    slots = sum(r["slots"] for r in rows.values())
    limit = min((r["max_models"] for r in rows.values()), default=0)
    overall = {"models": len(rows), "slots": slots, "max_models": limit,
               "fits": slots <= limit}
    if overall["fits"]:
        return overall, {name: dict(row) for name, row in rows.items()}
    line = (f"max_models {limit}: loaded together (--one-device), {len(rows)} models take "
            f"{slots} model slots; --max-subgraphs on some models, or load them on "
            "several devices")
    return overall, {name: {**row, "fits": False, "reasons": [*row["reasons"], line]}
                     for name, row in rows.items()}

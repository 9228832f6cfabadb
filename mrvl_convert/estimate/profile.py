"""The hardware profile: every figure of the cost estimate, read from a data file (YAML or JSON).

The built-in profile (``cn10ka_fp16.yaml``) ships with the package; a user passes their own with
``--hw-profile FILE`` or ``load_profile(path)``. A profile file is read with bounds (size, and
nesting and aliases as for a rule file) and validated against ``schemas/hwprofile.schema.json`` before use.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import jsonschema
import yaml

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.core.bounded_yaml import parse_bounded_yaml

MAX_PROFILE_BYTES = 64 * 1024  # a profile is a few dozen lines; anything bigger is not one
BUILTIN_PROFILE = "cn10ka_fp16.yaml"


class HardwareProfileError(MrvlConvertError):
    """A hardware profile file that cannot be read or does not validate."""


@dataclass(frozen=True)
class Precision:
    """The figures that depend on a layer's number format (fp16, or int8 layers)."""
    macs_per_cycle_per_tile: float
    vector_ops_per_cycle_per_tile: float
    weight_bytes_per_element: float
    bias_bytes_per_element: float
    activation_bytes_per_element: float

    def as_dict(self) -> Dict[str, float]:
        return dict(self.__dict__)


# int8 element sizes when a profile has no int8 section: int8 values, int32 biases.
_INT8_BYTES = MappingProxyType({"weight_bytes_per_element": 1.0, "bias_bytes_per_element": 4.0,
                                "activation_bytes_per_element": 1.0})


@dataclass(frozen=True)
class DeviceLimits:
    """What one device loads (the profile's ``device`` section; by default DPDK's cnxk driver
    limits, drivers/ml/cnxk/cnxk_ml_io.h). The rules themselves: ``estimate/device.py``."""
    max_models: int = 16            # ML_CNXK_MAX_MODELS
    max_inputs_outputs: int = 32    # ML_CNXK_MODEL_MAX_INPUT_OUTPUT
    max_dims: int = 8               # ML_CNXK_MODEL_MAX_DIMS
    max_batch: int = 1              # TVM-built models run at batch 1

    def as_dict(self) -> Dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HardwareProfile:
    """The figures of the roofline model (see docs/ESTIMATE.md); all per cycle of ``clock_hz``."""
    name: str
    source: str
    clock_hz: float
    tiles: int
    max_tiles: int
    macs_per_cycle_per_tile: float
    vector_ops_per_cycle_per_tile: float
    ocm_bytes_per_tile: float
    ddr_bytes_per_cycle: float
    weight_bytes_per_element: float
    bias_bytes_per_element: float
    activation_bytes_per_element: float
    channel_granule: int
    layer_overhead_cycles: float
    boundary_fixed_cycles: float
    boundary_bytes_per_cycle: float
    efficiency: Tuple[Tuple[str, float], ...]
    zero_cost_kinds: Tuple[str, ...]
    int8: Optional[Precision] = None   # the profile's int8 section, if it has one
    device: DeviceLimits = DeviceLimits()

    def precision(self, dtype: str) -> Precision:
        """The figures for a layer of ``dtype`` (its Nodes-JSON ``dtype``): the int8 section
        for int8 layers (without one: the fp16 rates at int8 element sizes), else fp16's."""
        fp16 = Precision(self.macs_per_cycle_per_tile, self.vector_ops_per_cycle_per_tile,
                         self.weight_bytes_per_element, self.bias_bytes_per_element,
                         self.activation_bytes_per_element)
        if dtype != "int8":
            return fp16
        return self.int8 or Precision(fp16.macs_per_cycle_per_tile,
                                      fp16.vector_ops_per_cycle_per_tile, **_INT8_BYTES)

    def efficiency_of(self, kind: str) -> float:
        table = dict(self.efficiency)
        return table.get(kind, table["default_vector"])

    def as_dict(self) -> Dict[str, Any]:
        """The figures as written into report.json, so every estimate says what it assumed."""
        return {"name": self.name, "source": self.source, "clock_hz": self.clock_hz,
                "max_tiles": self.max_tiles,
                "macs_per_cycle_per_tile": self.macs_per_cycle_per_tile,
                "vector_ops_per_cycle_per_tile": self.vector_ops_per_cycle_per_tile,
                "ocm_bytes_per_tile": self.ocm_bytes_per_tile,
                "ddr_bytes_per_cycle": self.ddr_bytes_per_cycle,
                "weight_bytes_per_element": self.weight_bytes_per_element,
                "bias_bytes_per_element": self.bias_bytes_per_element,
                "activation_bytes_per_element": self.activation_bytes_per_element,
                "channel_granule": self.channel_granule,
                "layer_overhead_cycles": self.layer_overhead_cycles,
                "boundary": {"fixed_cycles": self.boundary_fixed_cycles,
                             "bytes_per_cycle": self.boundary_bytes_per_cycle},
                "efficiency": dict(self.efficiency),
                "zero_cost_kinds": list(self.zero_cost_kinds),
                "int8": self.precision("int8").as_dict(), "device": self.device.as_dict()}


ProfileLike = Optional[Union[str, Path, HardwareProfile]]


def load_profile(profile: ProfileLike = None) -> HardwareProfile:
    """The built-in profile (``None``), a profile file (path), or a HardwareProfile as is."""
    if isinstance(profile, HardwareProfile):
        return profile
    if profile is None:
        return _builtin_profile()
    path = Path(profile)
    try:
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise HardwareProfileError(f"hardware profile {path} is {size} bytes, more than the "
                                       f"{MAX_PROFILE_BYTES} a profile may have")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareProfileError(f"hardware profile {path} cannot be read: {exc}") from None
    # A profile file is a user's document: nesting and aliases bounded as for a rule file.
    data = parse_bounded_yaml(text, str(path), what="hardware profile",
                              error=HardwareProfileError)
    return parse_profile(data, label=str(path))


@functools.lru_cache(maxsize=1)
def _builtin_profile() -> HardwareProfile:
    """The built-in profile, read and validated once per process: every conversion asks for it
    (twice), and parsing its YAML was a third of a small model's conversion. A frozen
    HardwareProfile of tuples and frozen parts: one object serves every caller."""
    text = resources.files("mrvl_convert.estimate").joinpath(BUILTIN_PROFILE).read_text()
    return parse_profile(yaml.safe_load(text), label=f"built-in {BUILTIN_PROFILE}")


def _schema() -> dict:
    return json.loads(resources.files("mrvl_convert.schemas")
                      .joinpath("hwprofile.schema.json").read_text())


def parse_profile(data: Any, *, label: str) -> HardwareProfile:
    """Validate a parsed profile document; a HardwareProfileError names the file and field."""
    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(data),
                    key=lambda e: list(e.absolute_path))
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path) or "<top level>"
        raise HardwareProfileError(f"hardware profile {label}: field {where}: "
                                   f"{errors[0].message}")
    if data["tiles"] > data["max_tiles"]:
        raise HardwareProfileError(f"hardware profile {label}: field tiles: {data['tiles']} is "
                                   f"more than max_tiles {data['max_tiles']}")
    return _build(data, label)


def _build(data: Mapping[str, Any], label: str) -> HardwareProfile:
    return HardwareProfile(
        name=data["name"], source=label, clock_hz=float(data["clock_hz"]),
        tiles=int(data["tiles"]), max_tiles=int(data["max_tiles"]),
        macs_per_cycle_per_tile=float(data["macs_per_cycle_per_tile"]),
        vector_ops_per_cycle_per_tile=float(data["vector_ops_per_cycle_per_tile"]),
        ocm_bytes_per_tile=float(data["ocm_bytes_per_tile"]),
        ddr_bytes_per_cycle=float(data["ddr_bytes_per_cycle"]),
        weight_bytes_per_element=float(data["weight_bytes_per_element"]),
        bias_bytes_per_element=float(data["bias_bytes_per_element"]),
        activation_bytes_per_element=float(data["activation_bytes_per_element"]),
        channel_granule=int(data["channel_granule"]),
        layer_overhead_cycles=float(data["layer_overhead_cycles"]),
        boundary_fixed_cycles=float(data["boundary"]["fixed_cycles"]),
        boundary_bytes_per_cycle=float(data["boundary"]["bytes_per_cycle"]),
        efficiency=tuple(sorted((str(k), float(v)) for k, v in data["efficiency"].items())),
        zero_cost_kinds=tuple(data.get("zero_cost_kinds", ())),
        int8=Precision(**{k: float(v) for k, v in data["int8"].items()}) if "int8" in data
        else None,
        device=DeviceLimits(**{k: int(v) for k, v in data.get("device", {}).items()}))

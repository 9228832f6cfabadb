"""What a Marvell layer kind is: its attributes and constants, declared once.

A ``LayerKind`` is plain frozen data. Lowering builds a typed ``Layer`` (ints, tuples, enums), the
emitter turns its values into the strings the Nodes-JSON holds through the same ``Attr``
declarations, and the simulator reads them back through them too, so a name, a type or a default
is written in exactly one place.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, FrozenSet, List, Mapping, Optional, Sequence,
                    Tuple, Type)

import numpy as np

from mrvl_convert.core.artifact import first_value

if TYPE_CHECKING:  # pragma: no cover
    from mrvl_convert.ir.layout import LayoutContext
    from mrvl_convert.ir.match import Composite
    from mrvl_convert.kernels.base import Kernel
    from mrvl_convert.kernels.layerspec import LayerSpec

# Marks an attribute that has no default: a Nodes-JSON without it is incomplete.
REQUIRED = object()

#: The layer sets a user's backend compiler may understand (``--layer-set``).
UPSTREAM = "upstream-0.19"
MARVELL = "marvell"
BOTH: FrozenSet[str] = frozenset({UPSTREAM, MARVELL})

#: Roles every kind's rules may use around its op in an int8 (QDQ) chain: the dequantize of the
#: data input, the quantize of the output, and a fused DequantizeLinear -> Relu -> QuantizeLinear.
QDQ_ROLES: FrozenSet[str] = frozenset({"in_dq", "out_q", "act_dq", "act_q"})


class Activation(enum.Enum):
    """A fused ``activation_type``, as the codegen spells it (``LUT``: an int8 layer's table
    lookup, with ``lut_const_name``)."""
    RELU = "relu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    LUT = "LUT"


def _activation(text: str) -> Optional[Activation]:
    """The Activation a Nodes-JSON spells ``text`` (any case), None for none."""
    folded = text.strip().lower()
    if folded in ("", "none"):
        return None
    return next(a for a in Activation if a.value.lower() == folded)


@dataclass(frozen=True)
class Attr:
    """One layer attribute as the Nodes-JSON writes it (a list of strings).

    ``type``: ``ints`` (a tuple of ``count`` ints), ``int``, ``float`` (one float32, written with
    17 significant digits so it reads back to the same float32), ``decimal`` (a float written as
    C's ``std::to_string`` does: "%f", six decimals), ``str``, ``flag`` (a bool written as
    "0"/"1") or ``activation`` (an ``Activation`` out of ``choices``). ``fixed``: the value is
    always this one (written by lowering, checked by the simulator). ``default``: what the
    simulator assumes when the attribute is absent. ``checked``: whether the simulator refuses
    a layer whose ``fixed`` attribute says otherwise (False for the codegen's informational
    attributes, such as ``bias_layout``).
    """
    name: str
    type: str
    doc: str
    count: Optional[int] = None
    default: Any = REQUIRED
    fixed: Any = None
    choices: Tuple[str, ...] = ()
    int8_choices: Tuple[str, ...] = ()   # choices too, of a layer with an output_scale (int8)
    checked: bool = True

    def encode(self, value: Any) -> List[str]:
        if self.type == "ints":
            return [str(int(v)) for v in value]
        if self.type in ("int", "flag"):
            return [str(int(value))]
        if self.type == "activation":
            return [Activation(value).value]
        if self.type == "float":
            return [f"{float(np.float32(value)):.17g}"]
        if self.type == "decimal":
            return [decimal_text(value)]
        return [str(value)]

    def read(self, spec: "LayerSpec") -> Any:
        """The typed value of this attribute in a Nodes-JSON layer, strictly parsed."""
        default = None if self.default is REQUIRED else self.default
        if self.type == "ints":
            return spec.ints(self.name, self.count, default)
        if self.type == "int":
            return spec.int1(self.name, default)
        if self.type == "flag":
            return spec.flag(self.name, bool(default))
        if self.type == "float":
            return spec.float1(self.name, default)
        if self.type == "activation":
            issue = self.issue(spec.attrs)
            if issue:
                raise spec.error(f"attrs.{self.name}", issue)
            value = _activation(spec.string(self.name, ""))
            if value is Activation.LUT and "output_scale" not in spec.attrs:
                raise spec.error(f"attrs.{self.name}", "LUT is the activation of an int8 layer "
                                                       "(one with output_scale)")
            return value
        if self.type == "decimal":
            return _read_decimal(spec, self.name, default)
        value = spec.string(self.name, default)
        if self.fixed is not None and self.checked and value != self.fixed:
            raise spec.error(f"attrs.{self.name}", f"is {value!r}; only {self.fixed!r} is defined")
        return value

    def issue(self, attrs: Mapping[str, Any]) -> Optional[str]:
        """Why this attribute makes a layer unrunnable, judged leniently (never raises)."""
        if self.name not in attrs:
            return None
        first = first_value(attrs[self.name])
        text = "" if first is None else str(first).strip()
        allowed = self.choices + (self.int8_choices if "output_scale" in attrs else ())
        if self.type == "activation" and \
                text.lower() not in ("", "none", *(c.lower() for c in allowed)):
            return f"only {', '.join(allowed)} can be fused, not {text!r}"
        if self.fixed is not None and self.checked and text != self.fixed:
            return f"{self.name} must be {self.fixed}"
        if self.type == "decimal" and not _is_number(text):
            return f"{self.name} is {text!r}, not a number"
        return None

    @property
    def json_type(self) -> str:
        """How nodes.schema.json describes the value."""
        if self.type == "float":
            return "floatstrlist"
        return "intstrlist" if self.type in ("ints", "int", "flag") else "strlist"


#: The optional fused activation of Conv2D, FC, Sum2D, Mul2D and Sub (upstream v0.19 fuses only
#: relu; the newer codegen's ``setActivationFunction`` also tanh and sigmoid).
FUSED_ACTIVATION = Attr("activation_type", "activation", "fused activation, applied last",
                        default=None, choices=("relu", "tanh", "sigmoid"))
#: The same attribute of the int8 forms of Conv2D, FC, Sum2D and Mul2D: relu, or LUT (a table
#: lookup after the layer, ``lut_const_name``; the newer codegen's ``take``).
INT8_ACTIVATION = Attr("activation_type", "activation",
                       "fused activation, applied last; int8: relu or LUT (a table lookup, "
                       "`lut_const_name`)", default=None, choices=("relu", "tanh", "sigmoid"),
                       int8_choices=("LUT",))


def decimal_text(value: float) -> str:
    """A float as the newer codegen writes ``alpha``, ``a_min``, ``exponent``...:
    ``std::to_string``, i.e. printf's "%f" (six decimals; "inf" for infinity)."""
    return f"{float(value):f}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_decimal(spec: "LayerSpec", name: str, default: Any) -> float:
    text = spec.string(name, None if default is None else decimal_text(default))
    try:
        return float(text)
    except ValueError:
        raise spec.error(f"attrs.{name}", f"expected a number, got {text!r}") from None


@dataclass(frozen=True)
class Const:
    """A constant a layer carries: written as ``<prefix>_const_name`` + ``<prefix>_const``."""
    role: str
    prefix: str
    doc: str
    required: bool = True

    @property
    def attr(self) -> str:
        return f"{self.prefix}_const_name"


#: The LUT of an int8 layer: 256 int8 values indexed by the int8 result's uint8 bit pattern.
LUT_CONST = Const("lut", "lut", "int8: the LUT, `[1, 256]` indexed by the result's uint8 bit "
                  "pattern (with activation_type LUT)", required=False)


Lower = Callable[["Composite", "LayoutContext"], None]


@dataclass(frozen=True)
class LayerKind:
    """Everything the project knows about one Marvell ``layer_name``."""
    name: str
    summary: str                       # one line: the semantics, for docs/FORMATS.md
    kernel: Type["Kernel"]
    lower: Optional[Lower]             # None: inserted by the layout pass, never matched
    required_roles: FrozenSet[str] = frozenset()
    optional_roles: FrozenSet[str] = frozenset()
    one_of_roles: FrozenSet[str] = frozenset()   # a rule's pattern must use at least one
    attrs: Tuple[Attr, ...] = ()
    consts: Tuple[Const, ...] = ()
    compute_heavy: bool = False        # makes a Mrvl region worth the trip (as upstream decides)
    reshape_like: bool = False         # moves bytes only; compared in the model's element order
    quantizable: bool = False          # has an int8 form in the newer codegen
    layer_sets: FrozenSet[str] = BOTH
    int8_kernel: Optional[Type["Kernel"]] = None   # runs the layer when it carries int8 scales
    r4: FrozenSet[str] = frozenset()   # the layer sets that write it R4 (4-D layout shapes, NHWC)
    r4_keeps_2d: bool = False          # R4 except a 2-D layer, written NC as it is (activations)
    r4_keeps_last: bool = False        # R4 pads a 3-D shape at axis 1, keeping its last axis C
    # A 3-D layer is written 4-D with a trailing 1 and NHWC, a 2-D one NC as it is: the
    # newer codegen's CreateCompositeMrvlFcLayer (not R4: no per-input shapes).
    nhwc_3d: bool = False
    composite: str = ""                # composite_name of a layer no rule made
    source: str = ""                   # where the layer's JSON contract was read
    notes: Tuple[str, ...] = field(default=())

    def attr(self, name: str) -> Attr:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(f"layer {self.name} declares no attribute {name!r}")

    def const(self, role: str) -> Const:
        for c in self.consts:
            if c.role == role:
                return c
        raise KeyError(f"layer {self.name} declares no constant {role!r}")

    def kernel_for(self, attrs: Mapping[str, Any]) -> Type["Kernel"]:
        """The kernel of a layer with these attributes: the int8 one when it has an
        ``output_scale`` (every int8 form of a quantizable kind writes one)."""
        if self.int8_kernel is not None and "output_scale" in attrs:
            return self.int8_kernel
        return self.kernel

    def capability_issue(self, attrs: Mapping[str, Any]) -> Optional[str]:
        """Why a layer with these attributes cannot run, without raising (None: it can)."""
        for a in self.attrs:
            issue = a.issue(attrs)
            if issue:
                return issue
        for c in self.consts:
            if c.required and c.attr not in attrs:
                return f"no {c.attr}"
        return self.kernel_for(attrs).capability_issue(attrs)


def roles(*names: str) -> FrozenSet[str]:
    return frozenset(names)


def ints(name: str, doc: str, count: Optional[int] = None,
         default: Optional[Sequence[int]] = None) -> Attr:
    return Attr(name, "ints", doc, count=count,
                default=REQUIRED if default is None else tuple(default))


def written(name: str, value: str, doc: str, *, checked: bool = False) -> Attr:
    """An attribute whose value is always ``value`` (the codegen writes it for every layer)."""
    return Attr(name, "str", doc, default=value, fixed=value, checked=checked)


def r4_shape(shape: List[int], keep_last: bool = False) -> List[int]:
    """A layout shape padded to 4-D as the newer codegen writes R4 layers: trailing 1s, and a
    2-D [N, C] as [N, 1, 1, C] (``resizeInputOutputLayoutTo4dim``). ``keep_last``: a 3-D
    [B, T, C] as [B, 1, T, C], its last axis still NHWC's C (Softmax)."""
    if keep_last and len(shape) == 3:
        return [shape[0], 1, shape[1], shape[2]]
    padded = list(shape) + [1] * (4 - len(shape))
    return [padded[0], padded[2], padded[3], padded[1]] if len(shape) == 2 else padded

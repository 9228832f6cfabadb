"""One Nodes-JSON layer as the kernels see it, with strict attribute readers.

Every reader raises ``ArtifactError`` naming the Nodes-JSON file, the layer and the field, so a
malformed artifact is reported where it is wrong instead of failing later inside numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.errors import ArtifactError

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class LayerSpec:
    """A layer node of a Nodes-JSON, resolved against its producers (physical shapes)."""

    index: int
    name: str
    layer_name: str
    attrs: Mapping[str, Any]
    input_shapes: Tuple[Shape, ...]
    shape: Shape
    source_nodes: Tuple[str, ...]
    file: str
    kind: Any = None   # the ``layers.LayerKind`` whose declarations ``value`` reads through
    out_shapes: Tuple[Shape, ...] = ()   # every output's shape (a Split has several)

    def value(self, name: str) -> Any:
        """Attribute ``name``, typed and defaulted as the layer kind declares it."""
        return self.kind.attr(name).read(self)

    # ----------------------------------------------------------------- errors
    def error(self, field: str, message: str) -> ArtifactError:
        return ArtifactError(
            f"{self.file}: layer #{self.index} {self.name} ({self.layer_name}), field "
            f"'{field}': {message}", node=self.name)

    # ---------------------------------------------------------------- readers
    def _raw_list(self, key: str) -> Optional[list]:
        if key not in self.attrs:
            return None
        value = self.attrs[key]
        if isinstance(value, (str, int)):
            value = [value]
        if not isinstance(value, list):
            raise self.error(f"attrs.{key}", f"expected a list of strings, got {value!r}")
        return value

    def ints(self, key: str, count: Optional[int] = None,
             default: Optional[Sequence[int]] = None) -> Tuple[int, ...]:
        """A list-of-strings attribute holding integers, e.g. ``"strides": ["2", "2"]``."""
        raw = self._raw_list(key)
        if raw is None:
            if default is None:
                raise self.error(f"attrs.{key}", "missing")
            return tuple(default)
        try:
            values = tuple(int(str(v).strip()) for v in raw)
        except ValueError:
            raise self.error(f"attrs.{key}", f"expected integers, got {raw!r}") from None
        if count is not None and len(values) != count:
            raise self.error(f"attrs.{key}", f"expected {count} integers, got {raw!r}")
        return values

    def int1(self, key: str, default: Optional[int] = None) -> int:
        return self.ints(key, 1, None if default is None else (default,))[0]

    def string(self, key: str, default: Optional[str] = None) -> str:
        raw = self._raw_list(key)
        if raw is None or len(raw) == 0:
            if default is None:
                raise self.error(f"attrs.{key}", "missing")
            return default
        if len(raw) != 1 or not isinstance(raw[0], str):
            raise self.error(f"attrs.{key}", f"expected one string, got {raw!r}")
        return raw[0]

    def float1(self, key: str, default: Optional[float] = None) -> float:
        """One finite positive float32 (a scale), exactly as written."""
        text = self.string(key, None if default is None else repr(default))
        try:
            value = np.float32(float(text.strip()))
        except ValueError:
            raise self.error(f"attrs.{key}", f"expected a number, got {text!r}") from None
        if not np.isfinite(value) or value <= 0:
            raise self.error(f"attrs.{key}", f"must be a finite positive number, got {text!r}")
        return float(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.string(key, "1" if default else "0").strip().lower()
        if value in ("1", "true"):
            return True
        if value in ("0", "false", ""):
            return False
        raise self.error(f"attrs.{key}", f"expected '0' or '1', got {value!r}")

    def const(self, key: str, consts: Mapping[str, np.ndarray], *,
              optional: bool = False) -> Optional[np.ndarray]:
        """The constant named by attribute ``key`` (e.g. ``kernel_const_name``)."""
        if key not in self.attrs and optional:
            return None
        name = self.string(key)
        if name not in consts:
            raise self.error(f"attrs.{key}",
                             f"names constant {name!r}, which the Constants-JSON does not hold")
        return consts[name]

    # ----------------------------------------------------------------- shapes
    def input_rank(self, position: int, rank: int) -> Shape:
        shape = self.input_shapes[position]
        if len(shape) != rank:
            raise self.error("inputs", f"input {position} has physical shape {list(shape)}, "
                                       f"expected rank {rank}")
        return shape

    def expect_shape(self, computed: Sequence[int]) -> None:
        """The emitted output shape must be the one the attributes imply."""
        computed = tuple(int(d) for d in computed)
        if computed != self.shape:
            raise self.error("shape", f"is {list(self.shape)} but the inputs "
                                      f"{[list(s) for s in self.input_shapes]} and attributes "
                                      f"give {list(computed)}")

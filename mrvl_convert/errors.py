"""The one exception family for everything a user can cause.

Every message names the model file (when there is one), the node or tensor involved, and what
to do about it. The CLI prints ``str(error)`` as one line and exits non-zero.
"""
from __future__ import annotations

from typing import Optional, Sequence


class MrvlConvertError(Exception):
    """Base class of every error the library raises on purpose."""

    def __init__(self, message: str, *, model: Optional[str] = None,
                 node: Optional[str] = None, tensor: Optional[str] = None) -> None:
        self.message = message
        self.model = model
        self.node = node
        self.tensor = tensor
        super().__init__(self._compose())

    def attach_model(self, model: str) -> "MrvlConvertError":
        """Name the model in an error raised by a stage that did not know it."""
        if self.model is None:
            self.model = model
            self.args = (self._compose(),)
        return self

    def _compose(self) -> str:
        where = []
        if self.model:
            where.append(f"model {self.model}")
        if self.node:
            where.append(f"node {self.node!r}")
        if self.tensor:
            where.append(f"tensor {self.tensor!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        return f"{prefix}{self.message}"


class ModelLoadError(MrvlConvertError):
    """The file is not a loadable ONNX model (not protobuf, truncated, missing external data...)."""


class InvalidModelError(MrvlConvertError):
    """The model loads but is not a valid graph (checker failure, cycle, missing initializer...)."""


class ShapeError(MrvlConvertError):
    """A dynamic dimension left unfixed, a malformed shape override, a shape that disagrees."""


class InputRankError(ShapeError):
    """A given input shape whose rank is not the input's: a mistake in the command (the CLI
    exits 2), not in the model."""


class InputShapeOverrideWarning(UserWarning):
    """A given input shape replaced a dim the model declares static (allowed, as onnxsim's
    ``--overwrite-input-shape`` does; the manifest records it as ``input_shape_overrides``)."""


class CalibrationWarning(UserWarning):
    """Calibration data not used in full: an array named after no model input (``labels``),
    or samples a static batch size leaves over. The manifest records it too
    (``quantization.calibration``)."""


class UnsupportedModelError(MrvlConvertError):
    """Valid ONNX that this tool cannot take (opset out of range, unknown domain...)."""


class RuleFileError(MrvlConvertError):
    """A rule file that does not parse or does not validate against rules.schema.json."""


class ArtifactError(MrvlConvertError):
    """An artifact file (Nodes-JSON, Constants-JSON, manifest) that is malformed or inconsistent."""


class OutputDirError(MrvlConvertError):
    """The output directory cannot be written, or holds something we must not overwrite."""


class OptionError(MrvlConvertError):
    """A keyword argument or command-line option out of its range (e.g. ``jobs=-1``)."""


class InputFeedError(MrvlConvertError):
    """An input feed of the wrong name, shape or dtype handed to a session."""


class NodeNotFoundError(MrvlConvertError, KeyError):
    """A node name that is not in the model; the message lists the closest names. A KeyError
    too, so code that looked a node up with ``except KeyError`` keeps working."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class Fp16RangeError(MrvlConvertError):
    """A Mrvl layer's float16 output overflowed to inf or became NaN."""

    def __init__(self, message: str, *, layer: str, source_nodes: Sequence[str],
                 model: Optional[str] = None) -> None:
        self.layer = layer
        self.source_nodes = list(source_nodes)
        super().__init__(message, model=model, node=", ".join(self.source_nodes) or layer)

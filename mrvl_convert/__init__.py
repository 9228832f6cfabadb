"""mrvl_convert: prepare ONNX CNNs for Marvell's MLIP accelerator (OCTEON 10).

Public surface: ``convert``, ``convert_many``, ``HybridSession``, ``compare``,
``analyze_quantization``, ``read_marvell_inputs``/``write_marvell_outputs`` (Marvell's
JSON input and output files), ``Result`` and the ``MrvlConvertError`` family. Everything else is
private and may change.
"""
from __future__ import annotations

from mrvl_convert.version import __version__  # noqa: E402

from mrvl_convert.errors import (ArtifactError, Fp16RangeError, InputFeedError, InvalidModelError,  # noqa: E402
                     ModelLoadError, MrvlConvertError, NodeNotFoundError, OptionError,
                     OutputDirError, RuleFileError, ShapeError, UnsupportedModelError)
from mrvl_convert.convert import Result, convert  # noqa: E402

_LAZY = {
    # The runtime pulls in onnxruntime sessions; batch conversion pulls in process pools.
    "HybridSession": ("mrvl_convert.runtime.session", "HybridSession"),
    "compare": ("mrvl_convert.verify.compare", "compare"),
    "convert_many": ("mrvl_convert.batch", "convert_many"),
    "analyze_quantization": ("mrvl_convert.verify.quant_analysis", "analyze_quantization"),
    "read_marvell_inputs": ("mrvl_convert.verify.marvell_files", "read_input_json"),
    "write_marvell_outputs": ("mrvl_convert.verify.marvell_files", "write_output_json"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'mrvl_convert' has no attribute {name!r}")


__all__ = ["convert", "convert_many", "HybridSession", "compare", "analyze_quantization", "Result",
           "read_marvell_inputs", "write_marvell_outputs",
           "MrvlConvertError",
           "ModelLoadError", "InvalidModelError", "ShapeError", "UnsupportedModelError",
           "RuleFileError", "ArtifactError", "OptionError", "OutputDirError", "InputFeedError",
           "Fp16RangeError", "NodeNotFoundError",
           "__version__"]

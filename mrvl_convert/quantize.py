"""int8 quantization of a float model with Marvell's own recipe, for the int8 layer set.

Marvell's flow (MarvellEmbeddedProcessors/MarvellMLTools, ``utils/tvm_mrvl_utils.py``) quantizes
with onnxruntime: ``quantize_static`` in QDQ format, symmetric per-tensor int8 for weights and
activations. The QDQ model it writes is what ``rules/marvell/qnn.yaml`` matches; onnxruntime
running it is the reference the int8 simulator is compared with.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx

from .errors import InputFeedError, ModelLoadError, OptionError
from .fold_bn import without_batchnorm
from .load import static_dim
from .layers import MARVELL

PathLike = Union[str, "os.PathLike[str]"]

def recipe() -> Dict[str, object]:
    """quantize_static's keyword arguments in Marvell's recipe besides the format and types
    (onnxruntime >= 1.18 names); a fresh dict each time, as quantize_static may keep it."""
    return {"per_channel": False,
            "extra_options": {"ActivationSymmetric": True, "WeightSymmetric": True}}


def quantize_int8(model: PathLike, out: PathLike,
                  calibration: Mapping[str, np.ndarray], exclude: Sequence[str] = ()) -> Path:
    """Write ``model`` quantized to QDQ int8 (Marvell's recipe) to ``out``.

    ``calibration``: input name -> samples stacked on axis 0 (any number; they are fed in
    batches of the input's static batch size). ``exclude``: names of nodes left in float
    (``keep_fp16.py``). Returns ``out``.
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    proto = _load(model)
    reader = _reader(proto, calibration, str(model))
    out = Path(out)
    with without_batchnorm(str(model), proto) as source:
        quantize_static(source, str(out), reader, quant_format=QuantFormat.QDQ,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QInt8,
                        nodes_to_exclude=list(exclude), **recipe())
    return out


def load_calibration(path: PathLike, model: PathLike) -> Dict[str, np.ndarray]:
    """The calibration samples of a ``.npz`` for ``model``: the arrays named as its inputs, or,
    for a one-input model, the file's only floating-point array."""
    names = [i.name for i in _load(model).graph.input]
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise InputFeedError(f"calibration file {path}: not a readable .npz ({exc})") from None
    if all(name in arrays for name in names):
        return {name: arrays[name] for name in names}
    floats = [key for key, value in arrays.items() if value.dtype.kind == "f"]
    if len(names) == 1 and len(floats) == 1:
        return {names[0]: arrays[floats[0]]}
    raise InputFeedError(f"calibration file {path}: needs an array per model input "
                         f"({names}); it holds {sorted(arrays)}")


def quantized_copy(model: PathLike, calibration: PathLike, folder: PathLike) -> Path:
    """``model`` quantized with the samples of the ``.npz`` ``calibration`` into ``folder``,
    under the model's own file name (so the artifact keeps the model's name)."""
    out = Path(folder) / Path(model).name
    quantize_int8(model, out, load_calibration(calibration, model))
    return out


def for_cli(models: List[Path], quantize: Optional[str], calibration: Optional[str],
            layer_set: str) -> List[Path]:
    """The models the CLI converts: as given, or with ``--quantize int8`` quantized with the
    ``--calibration`` samples (the int8 layers are in the ``marvell`` layer set only)."""
    if quantize is None:
        if calibration is not None:
            raise OptionError("--calibration is only used with --quantize int8")
        return models
    if calibration is None:
        raise OptionError("--quantize int8 needs --calibration DATA.npz (samples per input)")
    if layer_set != MARVELL:
        raise OptionError(f"--quantize int8 makes int8 layers, which layer set {layer_set!r} "
                          f"does not have; use --layer-set {MARVELL}")
    if not Path(calibration).is_file():
        raise OptionError(f"--calibration {calibration}: no such file")
    return quantized_models(models, calibration)


def quantized_models(models: List[Path], calibration: PathLike) -> List[Path]:
    """Every model quantized into a fresh temporary folder, removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="mrvl_int8_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    quantized = []
    for i, model in enumerate(models):
        (folder / str(i)).mkdir()  # one folder each: two models may share a file name
        quantized.append(quantized_copy(model, calibration, folder / str(i)))
    return quantized


def _load(model: PathLike) -> onnx.ModelProto:
    try:
        return onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ModelLoadError(f"cannot read ONNX model {model}: {exc}") from None


def _reader(proto: onnx.ModelProto, calibration: Mapping[str, np.ndarray], label: str):
    from onnxruntime.quantization import CalibrationDataReader

    inits = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    batches: List[Dict[str, np.ndarray]] = []
    for tensor in inputs:
        if tensor.name not in calibration:
            raise InputFeedError(f"{label}: no calibration samples for input {tensor.name!r}",
                                 tensor=tensor.name)
        samples = np.asarray(calibration[tensor.name], dtype=np.float32)
        dims = tensor.type.tensor_type.shape.dim
        batch = dims[0].dim_value if dims and static_dim(dims[0]) else 1
        if samples.ndim != len(dims) or samples.shape[0] < batch:
            raise InputFeedError(f"{label}: calibration samples of shape {list(samples.shape)} "
                                 f"do not stack inputs of rank {len(dims)}", tensor=tensor.name)
        for k, start in enumerate(range(0, samples.shape[0] - batch + 1, batch)):
            if k == len(batches):
                batches.append({})
            batches[k][tensor.name] = samples[start:start + batch]
    feeds = [b for b in batches if len(b) == len(inputs)]

    class _Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self._it: Iterator[Dict[str, np.ndarray]] = iter(feeds)

        def get_next(self) -> Optional[Dict[str, np.ndarray]]:
            return next(self._it, None)

    return _Feeds()

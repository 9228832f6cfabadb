"""Where the simulator's float32 matrix products run: numpy's BLAS or onnxruntime's MLAS.

Every Conv2D (im2col, Winograd or grouped) and every FC layer ends in one product of an
fp16-valued activation matrix with fp16-valued weights, accumulated in float32 (fp16.py). Which
library sums the products changes only the order of the float32 additions, never the fp16
number model: both engines take the same operands and give float32 results that the simulator
then rounds to float16.

* ``"numpy"`` (default): ``a @ w``, numpy's BLAS (the OpenBLAS numpy ships). Its speed depends
  on the kernels OpenBLAS picks; ``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 CPU halves it.
* ``"onnxruntime"``: one single-MatMul onnxruntime session per layer, holding the weights as a
  constant initializer. onnxruntime's MLAS packs constant weights once, at session creation,
  where OpenBLAS packs them again on every call, and it picks AVX-512 kernels whatever
  ``OPENBLAS_CORETYPE`` says (measured by ``benchmarks/bench_simulator.py``, figures in
  docs/BENCHMARKS.md). Creating the sessions costs compile time, onnxruntime keeps its own packed
  copy of the weights (it reads them from our array, an external initializer, so there are two
  copies, not four), and on tiny layers the call costs more than it saves.

Chosen once per compile (``MrvlSimulator(gemm=...)``, ``HybridSession(..., gemm=...)``); a
product object is bound to one weight and may be called from several threads at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

GEMM_ENGINES = ("numpy", "onnxruntime")

#: a -> a @ weight for one bound weight: [M, K] -> [M, N], or [B, M, K] -> [B, M, N].
Product = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class GemmEngine:
    """Which library multiplies, and (for onnxruntime) with how many intra-op threads.

    ``threads=0`` is onnxruntime's own default (one per physical core), as for
    ``InferenceSession``; numpy's BLAS keeps its own thread setting whatever this says.
    """

    kind: str = "numpy"
    threads: int = 0

    def __post_init__(self) -> None:
        if self.kind not in GEMM_ENGINES:
            raise ValueError(f"gemm must be one of {GEMM_ENGINES}, got {self.kind!r}")
        if self.threads < 0:
            raise ValueError(f"gemm threads must be >= 0, got {self.threads}")

    @classmethod
    def of(cls, value: "str | GemmEngine") -> "GemmEngine":
        return value if isinstance(value, GemmEngine) else cls(value)

    def bind(self, weight: np.ndarray) -> Product:
        """The product with this float32 weight ([K, N] or [B, K, N]), ready to call."""
        weight = np.ascontiguousarray(weight, dtype=np.float32)
        if self.kind == "numpy":
            return _NumpyProduct(weight)
        return _OrtProduct(weight, self.threads)


NUMPY_GEMM = GemmEngine()


class _NumpyProduct:
    def __init__(self, weight: np.ndarray) -> None:
        self.weight = weight

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return np.matmul(a, self.weight)


class _OrtProduct:
    """One onnxruntime session computing ``MatMul(a, W)`` with W a constant initializer.

    W is handed over as an external initializer that shares this object's array: a copy
    serialized into the model would be held twice more by the session
    (``benchmarks/bench_memory.py`` measures both).
    onnxruntime may read the array for as long as the session lives, so the array lives as
    long as this object.
    """

    def __init__(self, weight: np.ndarray, threads: int) -> None:
        import onnxruntime as ort  # only this engine needs it

        self.weight = weight
        self._value = ort.OrtValue.ortvalue_from_numpy(weight)
        options = _session_options(threads)
        options.add_external_initializers(["w"], [self._value])
        self.session = ort.InferenceSession(_matmul_model(weight), options,
                                            providers=["CPUExecutionProvider"])

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"a": np.ascontiguousarray(a, dtype=np.float32)})[0]


def _session_options(threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Between two products the simulator's own numpy passes need the cores: idle workers of
    # the layer just run must sleep, not spin (a ResNet-50 has one such pool per layer).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Each session's arena would keep its largest output for good, over one session per layer
    # ("trimmed" in benchmarks/bench_memory.py), for no speed measured.
    options.enable_cpu_mem_arena = False
    return options


def _matmul_model(weight: np.ndarray) -> bytes:
    """A serialized opset-13 model: input a [..., M, K], initializer w, output y = a @ w.

    w is declared with external data and no bytes: its values come from the session options.
    """
    from onnx import TensorProto, helper

    a_shape = list(weight.shape[:-2]) + ["M", weight.shape[-2]]
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=weight.shape,
                    data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(weight.nbytes))):
        w.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "mrvl_sim_matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # what every onnxruntime this project supports accepts
    return model.SerializeToString()

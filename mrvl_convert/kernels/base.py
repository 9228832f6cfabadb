"""Base class of the simulator's kernels, modelled on onnx's reference evaluator ``OpRun``.

The constructor does everything that depends only on the artifact (attribute parsing, shape
checks, constant decoding, fp16 rounding and its range check) once, at compile time;
``run(*inputs)`` only computes. The one exception is the re-layout of big weights into the form
only ``run`` uses (GEMM matrices, Winograd transforms: ``LazyWeights``): the graph engine never
calls ``run`` for most layers, so that form is made by the first ``run``. Inputs and outputs of
``run`` are fp16-valued float32 arrays in the layer's physical layout (see ``fp16.py``); the
simulator rounds every output to float16, in place, so a kernel that is not ``exact`` must
return a fresh array (never a view of an input). A kernel that multiplies by its weights binds
them once (by its first ``run``) to ``gemm`` (``gemm.py``), the engine the simulator was asked
to use; other kernels ignore it.
"""
from __future__ import annotations

import threading
from typing import (TYPE_CHECKING, Any, Callable, ClassVar, Generic, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar)

import numpy as np

from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec

if TYPE_CHECKING:  # pragma: no cover
    from mrvl_convert.kernels.onnx_form import OnnxBuilder


class Kernel:
    """One Marvell layer compiled to numpy."""

    #: Number of activation inputs; None means one or more (Concat), "1 or 2" is handled by Sum2D.
    num_inputs: ClassVar[Optional[int]] = 1
    #: True when the output is a selection or rearrangement of input values, so it is already
    #: on the fp16 grid and cannot overflow: the simulator skips rounding for these. A class
    #: default; a kernel may settle it per layer at compile time (Maxpool2D does).
    exact: bool = False
    #: True when every input value appears in the output (a rearrangement or a join), so an
    #: inf or NaN in an input is one in the output (``passes_nonfinite``).
    keeps_every_value: ClassVar[bool] = False
    #: The weights only ``run`` uses, made on its first call; None when the kernel has none.
    weights: "Optional[LazyWeights[Any]]" = None

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        self.spec = spec
        self.gemm = gemm
        self._check_arity()

    def run(self, *inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def to_onnx(self, builder: "OnnxBuilder", inputs: Sequence[str]) -> Optional[List[str]]:
        """The layer as ONNX nodes emitted into ``builder`` (onnx_form.py): the names of its
        outputs before fp16 rounding, or None (emitting nothing) when it has no ONNX form and
        runs in numpy. The graph engine uses a form only if the class defining it also defines
        (or inherits below it) the ``run`` in use, so a subclass with another ``run`` (the int8
        kernels) never inherits a float form."""
        return None

    def finite_on_finite(self) -> bool:
        """Whether the output, rounded to float16, is finite whenever every input is: then an
        inf or NaN in the output means one in an input, and a range check on the input's side
        finds it (``range_checks.range_checks`` leaves this layer without a check of its own
        once its input is covered). False is always safe."""
        return False

    def passes_nonfinite(self, index: int) -> bool:
        """Whether an inf or NaN anywhere in activation input ``index`` always leaves an inf or
        NaN somewhere in the output, whatever the other inputs hold. The graph engine then
        leaves the input's own range check to this layer's (``range_checks.range_checks``), so
        True must be shown for every input; False is always safe."""
        return self.keeps_every_value

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        """Why this layer cannot run, judged from its attributes alone (None: it can)."""
        return None

    # ---------------------------------------------------------------- helpers
    def _check_arity(self) -> None:
        n = len(self.spec.input_shapes)
        if self.num_inputs is None:
            if n < 1:
                raise self.spec.error("inputs", "expected at least one input")
        elif n != self.num_inputs:
            raise self.spec.error("inputs", f"expected {self.num_inputs} activation input(s), "
                                            f"got {n}")


T = TypeVar("T")


class LazyWeights(Generic[T]):
    """A kernel's numpy-only weight form, ``prepare(source())``, made on the first ``get``.

    Why lazy: with the graph engine most layers run in onnxruntime and never call ``run``, and
    their prepared forms would only hold memory. ``source`` gives the fp16-rounded weight, the
    one the kernel validated at compile time; it should hold no more than that layer's own
    array (a raw constant, or the segment's initializer: ``share``), and it is dropped once the
    form is made. Two threads may ``get`` at once: a lock makes the form exactly once.
    """

    def __init__(self, source: Callable[[], np.ndarray], prepare: Callable[[np.ndarray], T]
                 ) -> None:
        self._source: Optional[Callable[[], np.ndarray]] = source
        self._prepare = prepare
        self._value: Optional[T] = None
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self._value is not None

    def get(self) -> T:
        value = self._value
        if value is None:  # checked again under the lock: another thread may have made it
            with self._lock:
                if self._value is None:
                    assert self._source is not None
                    self._value = self._prepare(self._source())
                    self._source = None
                value = self._value
        return value

    def share(self, source: Callable[[], np.ndarray]) -> None:
        """Read the weight from ``source`` from now on (e.g. the array a graph-engine segment
        keeps anyway), so the raw constant the old source held can be freed; it must give the
        same values in the same layout."""
        with self._lock:
            if self._value is None:
                self._source = source


def const_broadcast_shape(spec: LayerSpec, const: np.ndarray) -> Tuple[int, ...]:
    """The output shape of input 0 combined elementwise with the constant
    ``input_const_name``, or the layer's error if the two do not broadcast."""
    shape = spec.input_shapes[0]
    try:
        return tuple(np.broadcast_shapes(shape, const.shape))
    except ValueError:
        raise spec.error("attrs.input_const_name", f"constant shape {list(const.shape)}"
                         f" does not broadcast with input {list(shape)}") from None


def read_bias(spec: LayerSpec, consts: Mapping[str, np.ndarray], o: int) -> np.ndarray:
    """The bias ([1,1,1,O] for Conv2D, [1,O] for FC) as a flat fp16-valued [O].

    Required, as FORMATS.md says: a Nodes-JSON that lost it must not run with other numbers.
    """
    bias = spec.const("bias_const_name", consts)
    if bias.size != o or max(bias.shape, default=1) != bias.size:
        raise spec.error("attrs.bias_const_name", f"bias has shape {list(bias.shape)}, "
                                                  f"expected {o} values along one axis")
    return fp16_const(spec, "bias_const_name", bias.reshape(o))

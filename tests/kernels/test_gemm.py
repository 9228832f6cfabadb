"""The simulator's GEMM engines (runtime/gemm.py): same products, whichever library sums them.

The reference is the float64 product of the same float32 operands; each engine may differ from
it only by float32 summation error, bounded per element by K * 2**-24 * (|a| @ |w|) (each of
the K additions rounds once, in any order).
"""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.runtime import MrvlSimulator
from mrvl_convert.kernels.gemm import GEMM_ENGINES, NUMPY_GEMM, GemmEngine
from support.jsonbuild import SubgraphBuilder, conv2d, fc


def assert_float32_product(got: np.ndarray, a: np.ndarray, w: np.ndarray) -> None:
    want = np.matmul(a.astype(np.float64), w.astype(np.float64))
    bound = a.shape[-1] * 2.0 ** -24 * np.matmul(np.abs(a).astype(np.float64),
                                                 np.abs(w).astype(np.float64))
    assert got.dtype == np.float32 and got.shape == want.shape
    assert (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("gemm", GEMM_ENGINES)
@pytest.mark.parametrize("m,k,n", [(1, 1568, 256), (7, 3, 5), (300, 64, 33)])
def test_bound_product_is_the_float32_product(gemm, m, k, n):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    product = GemmEngine(gemm).bind(w)
    got = product(a)
    assert_float32_product(got, a, w)
    # The simulator adds the bias and rounds to fp16 in place on what the product returns.
    assert got.flags.c_contiguous and got.flags.writeable
    assert_float32_product(product(a[:2]), a[:2], w)  # any number of rows, same binding


@pytest.mark.parametrize("gemm", GEMM_ENGINES)
def test_batched_product_and_non_contiguous_operands(gemm):
    """Winograd's [16, T, C] @ [16, C, O] and grouped conv's transposed column view."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 24, 8)).astype(np.float32)
    a = rng.standard_normal((40, 16, 24)).astype(np.float32).transpose(1, 0, 2)
    assert not a.flags.c_contiguous
    assert_float32_product(GemmEngine(gemm).bind(w)(a), a, w)


def test_engines_are_named_and_checked():
    assert GemmEngine.of("numpy") == NUMPY_GEMM
    engine = GemmEngine("onnxruntime", threads=1)
    assert GemmEngine.of(engine) is engine
    with pytest.raises(ValueError, match="gemm must be one of"):
        GemmEngine("mlas")
    with pytest.raises(ValueError, match="threads must be >= 0"):
        GemmEngine("onnxruntime", threads=-1)


def test_simulator_compiles_every_product_with_the_chosen_engine(tmp_path):
    """A conv (im2col), a Winograd-sized conv and an FC all get onnxruntime sessions, and the
    compiled subgraph gives what the numpy engine gives, to within one fp16 step."""
    rng = np.random.default_rng(2)
    b = SubgraphBuilder()
    x = b.input("x", (1, 28, 28, 64))
    t = conv2d(b, x, rng.standard_normal((64, 64, 1, 1)).astype(np.float32) / 8,
               np.zeros(64, np.float32), (28, 28), relu=True)
    t = conv2d(b, t, rng.standard_normal((64, 64, 3, 3)).astype(np.float32) / 24,
               np.zeros(64, np.float32), (28, 28), pads=(1, 1, 1, 1), relu=True)
    flat = b.layer("nn.batch_flatten", [t], (1, 28 * 28 * 64))
    out = fc(b, flat, rng.standard_normal((10, 28 * 28 * 64)).astype(np.float32) / 200,
             np.zeros(10, np.float32))
    paths = b.write(str(tmp_path), [out])
    ort_sim = MrvlSimulator(gemm="onnxruntime").compile(*paths)
    weighted = [s.kernel for s in ort_sim.steps if s.spec.layer_name in ("Conv2D", "FC")]
    assert [getattr(k, "mode", "fc") for k in weighted] == ["gemm", "winograd", "fc"]
    for kernel in weighted:
        product = kernel.winograd.product if hasattr(kernel, "winograd") else kernel.product
        assert hasattr(product, "session"), kernel.spec.name
    feed = {"x": rng.standard_normal((1, 28, 28, 64)).astype(np.float32)}
    got = ort_sim.run(feed)[0]
    want = MrvlSimulator().compile(*paths).run(feed)[0]
    np.testing.assert_allclose(got, want, rtol=2.0 ** -10, atol=2.0 ** -24)

"""onnxruntime's SessionOptions for every session the library opens.

The graph engine's segments and the CPU stages run with ``session_options`` (a fixed intra-op
budget whose idle workers sleep), CPU stages and reference runs of QDQ models as written
(``qdq_as_written``), and every session at the log level the caller asks for (``QUIET`` unless
``mrvl-convert -v``). onnxruntime is imported inside the functions, so the simulator alone does
not need it.
"""
from __future__ import annotations

from typing import Any

# onnxruntime's log levels: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.
QUIET, WARNINGS = 3, 2
# onnxruntime's norm fusions (``qdq_as_written``), under every name its versions register
# them by (LayerNormFusion, GeluFusion: ...L1/L2 in 1.2x and later; unknown names are ignored)
NORM_FUSIONS = ("LayerNormFusion", "LayerNormFusionL1", "LayerNormFusionL2",
                "SimplifiedLayerNormFusion", "SkipLayerNormFusion")
# and its Gelu fusions: an erf Gelu written out, fused, is 1 float32 ulp off it as well
GELU_FUSIONS = ("GeluFusion", "GeluFusionL1", "GeluFusionL2", "BiasGeluFusion", "FastGeluFusion",
                "QuickGeluFusion")


def ort_options(log_severity: int = QUIET) -> Any:
    """SessionOptions at this log level: every session the library opens takes its options
    from here, so onnxruntime's warnings (``[W:onnxruntime:...]``) reach the terminal only when
    asked for (``mrvl-convert -v``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = log_severity
    return options


def session_options(threads: int, log_severity: int = QUIET, spin: bool = False,
                    mem_pattern: bool = False) -> Any:
    """The options of every session the hybrid runs (segments and CPU stages): ``threads``
    intra-op workers that sleep when idle (a spinning pool left behind by one session would take
    the cores from the next), no inter-op pool (nodes run in order); log level 3, errors only.
    No memory pattern unless ``mem_pattern`` (see below). ``spin``: the workers may spin
    between parallel sections, as onnxruntime's default, for a session that runs alone (nothing
    else in the call to take the cores from)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = log_severity
    options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spin)))
    # Spinning ends with each call: workers left spinning would take the cores from whatever
    # the caller does between calls (another session, its own pre-processing).
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # The memory pattern's one block, planned over every value of a segment (a Cast pair per
    # rounded layer makes three per layer), comes on top of the arena chunks of the first run:
    # on a large network it raised the hybrid's peak and bought no measured speed; on a small
    # one it costs little and saves an allocation per node (docs/BENCHMARKS.md), so the
    # caller asks for it where the values are small.
    options.enable_mem_pattern = mem_pattern
    return options


def cpu_session_options(threads: int, log_severity: int = QUIET) -> Any:
    """One SessionOptions for every CPU stage, as for the graph engine's segments, running
    QDQ models as they are written (``qdq_as_written``)."""
    return qdq_as_written(session_options(threads, log_severity))


def qdq_as_written(options: Any) -> Any:
    """``options`` with onnxruntime's QDQ fusion off: DequantizeLinear, the float op and
    QuantizeLinear run as the model writes them. Why: the fused int8 kernels onnxruntime picks
    instead (QLinearConv, ...) equal that on ARM (the OCTEON's cores) and on x86 with VNNI, but
    on x86 with AVX2 only they sum pairs of products in saturating int16 (``vpmaddubsw``) and
    land many int8 steps away; a model without Q/DQ nodes is not affected.

    Also off: ``DoubleQDQPairsRemover``, a basic-level rewrite that ``disable_quant_qdq`` leaves
    on. It replaces Q(s1) -> DQ(s1) -> Q(s2) -> DQ(s2) by one pair whose scale it derives,
    which is not the double rounding the model writes; such chains appear wherever the transpose
    optimizer cancels a Transpose pair between two Q/DQ pairs (a Concat split per input by
    ``concat_sinking``: LEADER's int8 artifact was 4 steps off its own QDQ model there).

    Also off: the norm and Gelu fusions (``NORM_FUSIONS``, ``GELU_FUSIONS``, extended level),
    whose kernels compute otherwise than the nodes they replace. The norm fusions put a written
    ``Pow, ReduceMean, Add, Sqrt, Div, Mul`` (RMS norm, or a LayerNorm's tail) into one kernel
    that multiplies by a reciprocal instead of dividing: 1 float32 ulp off the written nodes.
    Whether a pattern is whole differs between the full model (the reference) and a CPU stage
    holding only part of it, so the two sides disagreed by that ulp; a QuantizeLinear after the
    norm turns it into an int8 step now and then, which a deep int8 decoder carries to its
    outputs (g2p-id's tiny-pron: 5% of peak at its first step's logits, against 0.0 with the
    fusions off on both sides)."""
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.add_session_config_entry("optimization.disable_specified_optimizers",
                                     ";".join(("DoubleQDQPairsRemover",) + NORM_FUSIONS
                                              + GELU_FUSIONS))
    return options


"""One model of a batch, where a worker runs it: convert, verify, and say what happened.

:func:`convert_one` is a top-level function that takes a picklable :class:`Job` and returns a
picklable :class:`Outcome`: it never raises, so one bad model never stops the batch, and it
works unchanged on a Dask or Ray executor (``distributed.Client(...).get_executor()``).
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
import traceback
import warnings
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from mrvl_convert.batch.outcome import COUNT_KEYS, FAILED, OK, SKIPPED, VERIFY_FAILED, Outcome
from mrvl_convert.batch.plan import Job, VerifyOptions
from mrvl_convert.batch.summary import verify_figures
from mrvl_convert.convert import convert_with
from mrvl_convert.estimate.device import device_row
from mrvl_convert.errors import CalibrationWarning, InputFeedError, MrvlConvertError
from mrvl_convert.options import ConvertOptions

# (model name, stage): "convert", then convert's steps ("quantize" with quantize=, "load",
# "match", "lower", "emit"), then "verify"
StageFn = Callable[[str, str], None]
INTERRUPTED = "not converted: interrupted"
FAIL_FAST = "not converted: an earlier model failed (--fail-fast)"


class _Interrupt:
    """A pool worker's SIGINT handler. Ctrl-C reaches every process of the terminal's group:
    the model a worker converts stops (KeyboardInterrupt), and the handler remembers it, so
    that the jobs the worker already holds are skipped rather than converted.

    It raises once: a second Ctrl-C must not cut short what the first one set off. And not
    from the moment a model's directory is being published until the worker takes its next
    job (``holding``): that model is finished, its outcome must reach the parent (raised
    then, the summary would miss a model whose directory is there)."""

    def __init__(self) -> None:
        self.fired = False
        self.holding = False
        self.stopped = False  # it raised: the model running then was stopped by Ctrl-C

    def __call__(self, signum: int, frame: object) -> None:
        raising = not (self.holding or self.fired)
        self.fired = True
        if raising:
            self.stopped = True
            raise KeyboardInterrupt


def init_worker(log_severity: Optional[int] = None) -> None:
    """The initializer of a pool worker process of ours."""
    signal.signal(signal.SIGINT, _Interrupt())
    if log_severity is not None:  # verify runs onnxruntime here: its process-wide log level too
        import onnxruntime as ort
        ort.set_default_logger_severity(log_severity)


@contextlib.contextmanager
def inline_interrupts() -> Iterator[Callable[[], None]]:
    """Models converted in this process (``jobs=1``): Ctrl-C is held from a model's publish
    until its outcome is recorded, as a pool worker holds it. Yields ``raise_if_held()``, to be
    called once the outcome is recorded: it raises the KeyboardInterrupt that was held.
    Without it a Ctrl-C just after the rename left a directory without its summary row.
    Only the main thread can own SIGINT; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    handler = _Interrupt()
    previous = signal.signal(signal.SIGINT, handler)

    def raise_if_held() -> None:
        if handler.fired:
            raise KeyboardInterrupt

    try:
        yield raise_if_held
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted() -> bool:
    """Ctrl-C reached this process since ``init_worker`` (the state is its SIGINT handler's)."""
    handler = signal.getsignal(signal.SIGINT)
    return isinstance(handler, _Interrupt) and handler.fired


def _handler() -> Optional[_Interrupt]:
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, _Interrupt) else None


def _hold(holding: bool = True) -> None:
    """Whether Ctrl-C is only remembered from now on, not raised (the model is published)."""
    handler = _handler()
    if handler is not None:
        handler.holding = holding


def _rearm_to_verify() -> None:
    """Verifying is part of the model's run: Ctrl-C stops it (the directory stays, unverified,
    without a row), as it does when Ctrl-C came while the model was being published."""
    _hold(False)
    if interrupted():
        raise KeyboardInterrupt


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, turned into another exception on its way up (an import it interrupted fails
    with ImportError), or raised in this worker while the model ran: not the model's failure."""
    handler = _handler()
    if handler is not None and handler.stopped:
        return True
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _reraise_interrupt(exc: BaseException) -> None:
    if _caused_by_interrupt(exc):
        raise KeyboardInterrupt from exc


def convert_one(job: Job, on_stage: Optional[StageFn] = None) -> Outcome:
    """Convert one model; every exception becomes a failed Outcome (top level: picklable).
    ``on_stage(name, stage)`` is called as the conversion and the verification start (only
    where it can be called: in this process). Ctrl-C stops it with KeyboardInterrupt, whatever
    exception it became, until the model's directory is being published."""
    _hold(False)  # before the check: a Ctrl-C after it raises, it is not only remembered
    if interrupted():
        return skipped(job, INTERRUPTED)
    return _convert_one(job, on_stage)


def _convert_one(job: Job, on_stage: Optional[StageFn]) -> Outcome:
    start = time.perf_counter()
    ignored: Tuple[str, ...] = ()
    try:
        options, ignored = _with_shapes(job)
        _stage(on_stage, job, "convert")
        result = convert_with(job.model, job.out_dir, options,
                              on_stage and (lambda stage: _stage(on_stage, job, stage)),
                              on_publish=_hold, feeds_for=_foreign_feeds(job))
        counts = {k: int(result.summary.get(k, 0)) for k in COUNT_KEYS}
        fragments = {"mrvl_mac_share": result.summary.get("mrvl_mac_share"),
                     "cut_by": tuple((c["op_type"], c["nodes"]) for c in result.report["cut_by"]),
                     "device": device_row(result.report["device"]),
                     "mac_shares": dict(result.report["precision"]["shares"]),
                     "codegen": result.manifest["codegen"],
                     "notices": _notices(result.manifest, result.report)}
        if job.verify is not None:
            _rearm_to_verify()
            _stage(on_stage, job, "verify")
        figures = _verify(job, job.verify) if job.verify is not None else None
    except VerifyError as exc:  # converted, but the comparison failed: the artifacts stay
        _reraise_interrupt(exc)
        return replace(failed(job, start, exc, ignored=ignored), status=VERIFY_FAILED,
                       counts=counts, verified=False, verify=exc.figures,
                       verify_note=exc.figures.get("line"), **fragments)
    except MrvlConvertError as exc:
        _reraise_interrupt(exc)
        return failed(job, start, exc, ignored=ignored)
    except Exception as exc:  # a bug: report it with its traceback, never swallow it
        _reraise_interrupt(exc)
        return failed(job, start, exc, ignored=ignored, trace=traceback.format_exc())
    return Outcome(job.model, job.name, OK, job.out_dir, counts, time.perf_counter() - start,
                   ignored_shapes=ignored, verified=True if job.verify is not None else None,
                   verify_note=figures and figures["line"], verify=figures, **fragments)


def _foreign_feeds(job: Job) -> Any:
    """The verify inputs as the samples another quantizer's requantization cost is measured
    on at conversion (``convert_with``'s ``feeds_for``), or None."""
    if job.verify is None or job.verify.inputs is None:
        return None
    from mrvl_convert.verify.feeds import model_feeds
    return partial(model_feeds, str(job.verify.inputs))


def _notices(manifest: Dict[str, Any], report: Dict[str, Any]) -> Dict[str, Any]:
    calibration = manifest.get("quantization", {}).get("calibration", {})
    notices = {"input_shape_overrides": manifest["model"].get("input_shape_overrides", {}),
               "calibration_warnings": list(calibration.get("warnings", []))}
    foreign = report.get("foreign_int8")
    if "quantization" in manifest or (foreign and foreign["mode"] == "requantize"):
        # int8 (--quantize, or another quantizer's QDQ): how much of it stayed int8, and why not
        notices["int8"] = {"shares": report["precision"]["shares"],
                           "not_int8": report["precision"]["not_int8"][:1]}
    if foreign:
        share = report["summary"].get("mrvl_mac_share") or 0.0
        line = f"{foreign['line']}; {100 * share:.1f}% of the MACs run on the accelerator"
        top = _most_macs_on_cpu(report)
        if share < 0.5 and top:
            line += f", most cut by {top} on CPU (report.json nodes[].reason)"
        notices["foreign_int8"] = line
    return notices


def _most_macs_on_cpu(report: Dict[str, Any]) -> str:
    """'OP xN': the CPU nodes holding the most MACs (``precision.not_int8``, ranked by MACs;
    a share of MACs is cut by MACs, not by how many nodes stay), else the op type most nodes
    on CPU have (``cut_by``), else ''."""
    group = next((g for g in report["precision"].get("not_int8", ())
                  if g["placement"] == "cpu"), None)
    if group is None:
        cut = report["cut_by"][0] if report["cut_by"] else None
        return f"{cut['op_type']} x{cut['nodes']}" if cut else ""
    op_of = {e["name"]: e["op_type"] for e in report["nodes"]}
    ops = [op_of.get(name, name) for name in group["nodes"]]
    return ", ".join(f"{op} x{ops.count(op)}" for op in dict.fromkeys(ops))


def _with_shapes(job: Job) -> Tuple[ConvertOptions, Tuple[str, ...]]:
    """The job's options with the input shapes its model takes, and the all-model overrides
    it has no input for (ignored)."""
    shapes, ignored = job.shapes, ()
    if shapes and job.ignore_unknown_shapes:
        shapes, ignored = _shapes_for(job.model, shapes)
    if job.model_shapes:
        shapes = {**(shapes or {}), **job.model_shapes}
    return replace(job.options, shapes=shapes), ignored


def _shapes_for(model: str, shapes: Mapping[str, List[int]]
                ) -> Tuple[Dict[str, List[int]], Tuple[str, ...]]:
    """Keep only the overrides naming an input of this model (weights are not read)."""
    import onnx
    try:
        proto = onnx.load_model(model, load_external_data=False)
    except Exception:  # not ONNX: let convert() raise its own, well-worded error
        return dict(shapes), ()
    inputs = {i.name for i in proto.graph.input}
    kept = {k: v for k, v in shapes.items() if k in inputs}
    return kept, tuple(sorted(k for k in shapes if k not in inputs))


def _stage(on_stage: Optional[StageFn], job: Job, stage: str) -> None:
    if on_stage is not None:
        on_stage(job.name, stage)


def failed(job: Job, start: float, exc: BaseException, *, ignored: Tuple[str, ...] = (),
           trace: Optional[str] = None) -> Outcome:
    """The Outcome of a model not converted: ``exc``'s message naming the model; with
    ``trace``, a bug of ours, said so."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if trace is not None:
        message = (f"internal error {type(exc).__name__}: {message} (a bug in mrvl_convert; "
                   "please report it with the model at the project's issue tracker)")
    if job.model not in message:
        message = f"model {job.model}: {message}"
    return Outcome(job.model, job.name, FAILED, job.out_dir, {}, time.perf_counter() - start,
                   error=message, error_type=type(exc).__name__, traceback=trace,
                   ignored_shapes=ignored)


def skipped(job: Job, why: str = FAIL_FAST) -> Outcome:
    return Outcome(job.model, job.name, SKIPPED, job.out_dir, error=why)


class VerifyError(MrvlConvertError):
    """The converted model's outputs do not match onnxruntime's on the original model; or its
    verify inputs do not fit it. ``figures``: what summary.json records of the comparison."""

    def __init__(self, message: str, *, model: Optional[str] = None,
                 figures: Optional[Dict[str, Any]] = None) -> None:
        self.figures = dict(figures or {})
        super().__init__(message, model=model)


def _verify(job: Job, checks: VerifyOptions) -> Dict[str, Any]:
    """Run the hybrid artifact against onnxruntime on the original model (``verify``); the
    figures of the comparison, or a VerifyError carrying them."""
    from mrvl_convert.verify.compare import compare  # imported lazily: onnxruntime sessions, simulator
    from mrvl_convert.verify.tolerances import Tolerances
    tolerances = Tolerances().with_bounds(dict(checks.atol), dict(checks.rtol),
                                          "given with --atol/--rtol")
    try:
        feeds, origin = _verify_feeds(job, checks)
        # int8: judged against the QDQ model, and the fp32 model says what quantizing cost (a
        # requantized foreign model: the requantized QDQ model, and the model as given)
        reference = _reference(job)
        fp32 = job.model if reference != job.model else None
        run = partial(compare, reference, job.out_dir, feeds, tolerances=tolerances,
                      log_severity=checks.log_severity, criterion=checks.criterion,
                      fp32=fp32, origin=origin)
        report = run()
        if report.far_above_floor:  # a converter defect: its line names the first layer over
            report = run(layers=True)
    except MrvlConvertError as exc:  # e.g. inputs that do not fit: the artifacts stay valid
        raise VerifyError(f"converted into {job.out_dir}, but verify could not run: "
                          f"{exc}", model=job.model,
                          figures={"passed": False, "error": str(exc), "line": str(exc)}) from None
    figures = verify_figures(report, None if checks.inputs is None else str(checks.inputs))
    if not report.passed:
        raise VerifyError(f"converted into {job.out_dir}, but verify failed: "
                          f"{report.summary_line()[:400]}", model=job.model, figures=figures)
    return figures


def _verify_feeds(job: Job, checks: VerifyOptions) -> Tuple[Optional[List[Dict[str, Any]]],
                                                          Any]:
    """The samples verify judges and their ``SampleOrigin``: ``--verify-inputs``' if given;
    else the calibration samples held out of calibration (``calibration_split``'s ``judge``:
    the quantizer never saw them), then seeded random ones up to ``DEFAULT_VERIFY_SAMPLES``;
    else (None, None): ``compare``'s own random ones, that many."""
    from mrvl_convert.core.samples import (DEFAULT_VERIFY_SAMPLES, HELD_OUT, RANDOM,
                                           VERIFY_INPUTS, SampleOrigin)
    from mrvl_convert.runtime.session import HybridSession
    from mrvl_convert.verify.feeds import load_npz_feeds
    from mrvl_convert.verify.reference import default_feeds
    if checks.inputs is None and job.options.quantize is None:
        return None, None
    specs = HybridSession(job.out_dir).input_specs
    if checks.inputs is not None:
        feeds = load_npz_feeds(str(checks.inputs), specs)
        return feeds, SampleOrigin(((VERIFY_INPUTS, len(feeds)),))
    held = _held_out_feeds(job, specs)
    extra = default_feeds(job.model, specs, 0, max(0, DEFAULT_VERIFY_SAMPLES - len(held)))
    return held + extra, SampleOrigin(((HELD_OUT, len(held)), (RANDOM, len(extra))))


def _held_out_feeds(job: Job, specs: Any) -> List[Dict[str, Any]]:
    """The calibration samples the quantizer held out (``recipe.calibration_choice``), one
    feed each; none from a CalibrationDataReader (it cannot be split)."""
    from mrvl_convert.core.samples import calibration_split
    from mrvl_convert.quantize.recipe import load_calibration
    from mrvl_convert.verify.feeds import stacked_feeds
    data = job.options.quantize.calibration
    if isinstance(data, (str, Path)):
        with warnings.catch_warnings():  # said once, when the model was quantized
            warnings.simplefilter("ignore", CalibrationWarning)
            data = load_calibration(data, job.model)
    if not isinstance(data, Mapping):
        return []
    names = [spec.name for spec in specs]
    arrays = {k: v for k, v in data.items() if k in names}
    counts = {len(v) for v in arrays.values()}
    if len(arrays) != len(names) or len(counts) != 1:
        return []
    _, judge = calibration_split(counts.pop()).take_stacked(arrays)
    if not judge[names[0]].size:
        return []
    try:
        return stacked_feeds(judge, specs, "the calibration data")
    except InputFeedError:  # rows that are no feed (an input of static batch > 1): random ones
        return []


def _reference(job: Job) -> str:
    """The model verify compares with: the QDQ model kept in the artifact when the converter
    quantized (int8 is judged against onnxruntime running it) or requantized another
    quantizer's QDQ model to (``frontend/foreign_kept.py``), else the model converted."""
    from mrvl_convert.core.artifact import read_json
    manifest = read_json(Path(job.out_dir) / "manifest.json", "manifest")
    kept = manifest.get("quantization") or manifest.get("foreign_int8")
    if not kept:
        return job.model
    return str(Path(job.out_dir) / kept["file"])

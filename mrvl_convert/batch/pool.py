"""Convert many models at once, on a process pool or on any ``concurrent.futures.Executor``.

``convert_many(models, out_dir)`` converts each model into ``out_dir/<name>/`` (``name`` is the file
stem made safe, with ``_2``, ``_3``... added in input order when two models would share it) and
writes ``out_dir/summary.json``. Each model runs in :func:`convert_one`, a top-level function that
takes a small picklable :class:`Job` and returns a small picklable :class:`Outcome`: it never
raises, so one bad model never stops the batch, and it works unchanged on a Dask or Ray executor
(``distributed.Client(...).get_executor()``).

Shape overrides (``shapes={"x": [1, 3, 224, 224]}``) apply to every model that has an input of that
name; in a batch of several models they are ignored for models that do not have it (a single model
given a name it lacks is an error, as in ``convert``). An entry whose value is a mapping applies to
the models its key matches (a file name, a stem or a glob: ``{"det*.onnx": {"images": [1, 3, 416,
416]}}``), overrides the all-model entries, and must name an input of each model it matches.

Statuses: ``ok``; ``verify_failed`` (converted and kept, but ``verify`` found an output outside
its tolerance); ``failed`` (not converted, nothing written); ``skipped`` (``fail_fast``).
``summary.json`` is merged with the one already in ``out_dir``: one row per model directory.
"""
from __future__ import annotations

import concurrent.futures as cf
import fnmatch
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from mrvl_convert.errors import MrvlConvertError, OptionError
from mrvl_convert.frontend.load import safe_name, shape_override
from mrvl_convert.batch.summary import (COUNT_KEYS, FAILED, OK, SKIPPED, SUMMARY_FILE, VERIFY_FAILED,
                      load_summary, prepare_out_dir, summary_document, verify_figures,
                      write_summary)

__all__ = ["BatchResult", "Job", "Outcome", "VerifyError", "VerifyOptions", "convert_many",
           "convert_one", "load_summary", "plan_jobs", "prepare_out_dir", "shapes_per_model",
           "summary_document", "unique_names", "write_summary", "SUMMARY_FILE", "COUNT_KEYS"]

PathLike = Union[str, os.PathLike]
POLL_SECONDS = 0.5   # how often a pool run looks for models a worker has started
ProgressFn = Callable[["Outcome"], None]
# (model name, stage): "convert", then convert's steps ("quantize" with quantize=, "load",
# "match", "lower", "emit"), then "verify"
StageFn = Callable[[str, str], None]
Shapes = Mapping[str, Union[Sequence[int], Mapping[str, Sequence[int]]]]



@dataclass(frozen=True)
class Job:
    """Everything one worker needs: plain strings, lists and dicts only (cheap to pickle)."""
    model: str                      # absolute path of the ONNX file
    name: str                       # artifact directory name inside out_dir
    out_dir: str                    # absolute path of out_dir/<name>
    shapes: Optional[Dict[str, List[int]]] = None
    model_shapes: Optional[Dict[str, List[int]]] = None   # this model's own: never ignored
    policy: str = "multi"
    rules: Tuple[str, ...] = ()
    ignore_unknown_shapes: bool = False
    verify: bool = False
    estimate: Optional[str] = None      # "builtin" or a hardware profile file: report.json estimate
    draw: bool = False                  # also write <name>.html and <name>.placement.onnx
    max_subgraphs: Optional[int] = None
    deny: Tuple[str, ...] = ()
    min_compute_layers: int = 1         # a Mrvl region with fewer Conv2D/FC layers runs on CPU
    layer_set: str = "marvell"          # the layer kinds the target's backend compiler reads
    verify_inputs: Optional[str] = None  # .npz of real inputs for verify (else random)
    atol: Tuple[Tuple[Optional[str], float], ...] = ()   # (output name or None for all, value)
    rtol: Tuple[Tuple[Optional[str], float], ...] = ()
    log_severity: int = 3               # onnxruntime's log level in verify (2: warnings too)
    # (calibration path, method, nodes kept in float): --quantize int8 [--keep-fp16]
    quantize: Optional[Tuple[str, str, Tuple[str, ...]]] = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one model. ``status``: ``ok``, ``verify_failed`` (converted, verify
    failed), ``failed`` (not converted) or ``skipped`` (fail-fast)."""
    model: str
    name: str
    status: str
    out_dir: str
    counts: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: Optional[str] = None
    error_type: Optional[str] = None
    traceback: Optional[str] = None          # only for internal errors (bugs), never user errors
    ignored_shapes: Tuple[str, ...] = ()     # shape overrides this model had no input for
    verified: Optional[bool] = None
    verify_note: Optional[str] = None       # compare()'s one-line verdict when verify ran
    verify: Optional[Dict[str, Any]] = None  # verify's figures (summary.json "verify")
    mrvl_mac_share: Optional[float] = None
    cut_by: Tuple[Tuple[str, int], ...] = ()  # op types left on CPU, most nodes first

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def converted(self) -> bool:
        """The artifact directory was written (ok, or converted but verify failed)."""
        return self.status in (OK, VERIFY_FAILED)

    @property
    def internal(self) -> bool:
        """True when the failure is a bug in mrvl_convert rather than a problem with the model."""
        return self.traceback is not None


class BatchResult(List[Outcome]):
    """The outcomes of a batch, in input order."""

    @property
    def ok(self) -> List[Outcome]:
        return [o for o in self if o.status == OK]

    @property
    def failed(self) -> List[Outcome]:
        """Models not converted (a verify failure is not one: see ``verify_failed``)."""
        return [o for o in self if o.status == FAILED]

    @property
    def verify_failed(self) -> List[Outcome]:
        """Models converted whose verify found an output outside its tolerance."""
        return [o for o in self if o.status == VERIFY_FAILED]

    @property
    def skipped(self) -> List[Outcome]:
        return [o for o in self if o.status == SKIPPED]

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self)


# ---- the worker ------------------------------------------------------------------------------

_interrupted = False  # set in a pool worker of ours by Ctrl-C: the jobs it still holds are skipped


def _init_worker(log_severity: Optional[int] = None) -> None:
    def on_sigint(signum, frame):
        global _interrupted
        _interrupted = True
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_sigint)
    if log_severity is not None:  # verify runs onnxruntime here: its process-wide log level too
        import onnxruntime as ort
        ort.set_default_logger_severity(log_severity)


def convert_one(job: Job, on_stage: Optional[StageFn] = None) -> Outcome:
    """Convert one model; every exception becomes a failed Outcome (top level: picklable).
    ``on_stage(name, stage)`` is called as the conversion and the verification start (only
    where it can be called: in this process)."""
    if _interrupted:
        return _skipped(job, "not converted: interrupted")
    start = time.perf_counter()
    ignored: Tuple[str, ...] = ()
    try:
        from mrvl_convert.convert import convert
        shapes = job.shapes
        if shapes and job.ignore_unknown_shapes:
            shapes, ignored = _shapes_for(job.model, shapes)
        if job.model_shapes:
            shapes = {**(shapes or {}), **job.model_shapes}
        _stage(on_stage, job, "convert")
        result = convert(job.model, job.out_dir, shapes=shapes, policy=job.policy,
                         rules=list(job.rules) or None, name=job.name, draw=job.draw,
                         estimate=(True if job.estimate == "builtin" else job.estimate),
                         max_subgraphs=job.max_subgraphs, deny=list(job.deny),
                         min_compute_layers=job.min_compute_layers, layer_set=job.layer_set,
                         quantize=_quantization(job),
                         on_stage=on_stage and (lambda stage: _stage(on_stage, job, stage)))
        counts = {k: int(result.summary.get(k, 0)) for k in COUNT_KEYS}
        fragments = {"mrvl_mac_share": result.summary.get("mrvl_mac_share"),
                     "cut_by": tuple((c["op_type"], c["nodes"]) for c in result.report["cut_by"])}
        if job.verify:
            _stage(on_stage, job, "verify")
        figures = _verify(job) if job.verify else None
    except VerifyError as exc:  # converted, but the comparison failed: the artifacts stay
        return replace(_failed(job, start, exc, ignored=ignored), status=VERIFY_FAILED,
                       counts=counts, verified=False, verify=exc.figures,
                       verify_note=exc.figures.get("line"), **fragments)
    except MrvlConvertError as exc:
        return _failed(job, start, exc, ignored=ignored)
    except Exception as exc:  # a bug: report it with its traceback, never swallow it
        return _failed(job, start, exc, ignored=ignored, trace=traceback.format_exc())
    return Outcome(job.model, job.name, OK, job.out_dir, counts, time.perf_counter() - start,
                   ignored_shapes=ignored, verified=True if job.verify else None,
                   verify_note=figures and figures["line"], verify=figures, **fragments)


def _quantization(job: Job) -> Any:
    if job.quantize is None:
        return None
    from mrvl_convert.quantize.recipe import Quantization
    return Quantization(*job.quantize)


def _reference(job: Job) -> str:
    """The model verify compares with: the QDQ model kept in the artifact when the converter
    quantized (int8 is judged against onnxruntime running it), else the model converted."""
    if job.quantize is None:
        return job.model
    from mrvl_convert.core.artifact import read_json
    manifest = read_json(Path(job.out_dir) / "manifest.json", "manifest")
    return str(Path(job.out_dir) / manifest["quantization"]["file"])


def _stage(on_stage: Optional[StageFn], job: Job, stage: str) -> None:
    if on_stage is not None:
        on_stage(job.name, stage)


def _failed(job: Job, start: float, exc: BaseException, *, ignored: Tuple[str, ...] = (),
            trace: Optional[str] = None) -> Outcome:
    message = " ".join(str(exc).split()) or type(exc).__name__
    if trace is not None:
        message = (f"internal error {type(exc).__name__}: {message} (a bug in mrvl_convert; "
                   "please report it with the model at the project's issue tracker)")
    if job.model not in message:
        message = f"model {job.model}: {message}"
    return Outcome(job.model, job.name, FAILED, job.out_dir, {}, time.perf_counter() - start,
                   error=message, error_type=type(exc).__name__, traceback=trace,
                   ignored_shapes=ignored)


class VerifyError(MrvlConvertError):
    """The converted model's outputs do not match onnxruntime's on the original model; or its
    verify inputs do not fit it. ``figures``: what summary.json records of the comparison."""

    def __init__(self, message: str, *, model: Optional[str] = None,
                 figures: Optional[Dict[str, Any]] = None) -> None:
        self.figures = dict(figures or {})
        super().__init__(message, model=model)


def _verify(job: Job) -> Dict[str, Any]:
    """Run the hybrid artifact against onnxruntime on the original model (``verify``); the
    figures of the comparison, or a VerifyError carrying them."""
    from mrvl_convert.verify.compare import compare  # imported lazily: onnxruntime sessions, simulator
    from mrvl_convert.verify.tolerances import Tolerances
    tolerances = Tolerances().with_bounds(dict(job.atol), dict(job.rtol),
                                          "given with --atol/--rtol")
    try:
        feeds = _verify_feeds(job)
        report = compare(_reference(job), job.out_dir, feeds, tolerances=tolerances,
                         log_severity=job.log_severity)
    except MrvlConvertError as exc:  # e.g. inputs that do not fit: the artifacts stay valid
        raise VerifyError(f"converted into {job.out_dir}, but verify could not run: "
                          f"{exc}", model=job.model,
                          figures={"passed": False, "error": str(exc), "line": str(exc)}) from None
    figures = verify_figures(report, job.verify_inputs)
    if not report.passed:
        raise VerifyError(f"converted into {job.out_dir}, but verify failed: "
                          f"{report.summary_line()[:400]}", model=job.model, figures=figures)
    return figures


def _verify_feeds(job: Job) -> Optional[List[Dict[str, Any]]]:
    if job.verify_inputs is None:
        return None
    from mrvl_convert.runtime.session import HybridSession
    from mrvl_convert.verify.feeds import load_npz_feeds
    specs = HybridSession(job.out_dir).input_specs
    return load_npz_feeds(job.verify_inputs, specs)


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


# ---- planning --------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerifyOptions:
    """How ``verify`` judges: real inputs (.npz) or random ones, and the tolerances
    (``atol``/``rtol``: output name, or None for every output, to a value)."""
    inputs: Optional[PathLike] = None
    atol: Mapping[Optional[str], float] = field(default_factory=dict)
    rtol: Mapping[Optional[str], float] = field(default_factory=dict)
    log_severity: int = 3

    def job_fields(self) -> Dict[str, Any]:
        return {"verify_inputs": None if self.inputs is None else os.path.abspath(self.inputs),
                "atol": _pairs(self.atol), "rtol": _pairs(self.rtol),
                "log_severity": self.log_severity}


def _pairs(values: Mapping[Optional[str], float]) -> Tuple[Tuple[Optional[str], float], ...]:
    return tuple(sorted(values.items(), key=lambda kv: (kv[0] is not None, kv[0] or "")))


def plan_jobs(models: Sequence[PathLike], out_dir: PathLike, *,
              shapes: Optional[Shapes] = None, policy: str = "multi",
              rules: Optional[Sequence[PathLike]] = None, verify: bool = False,
              estimate: Optional[str] = None, draw: bool = False,
              max_subgraphs: Optional[int] = None, deny: Sequence[str] = (),
              layer_set: str = "marvell", min_compute_layers: int = 1,
              verify_options: Optional[VerifyOptions] = None,
              quantize: Optional[Any] = None) -> List[Job]:
    """One Job per model with a unique, deterministic artifact directory name."""
    out = Path(os.path.abspath(out_dir))
    common, per_model = shapes_per_model(shapes, [Path(m) for m in models])
    rule_paths = tuple(os.path.abspath(r) for r in _as_list(rules))
    names = unique_names([Path(m) for m in models])
    extra = (verify_options or VerifyOptions()).job_fields()
    return [Job(model=os.path.abspath(m), name=n, out_dir=str(out / n), shapes=common or None,
                model_shapes=own or None, policy=policy, rules=rule_paths,
                ignore_unknown_shapes=len(models) > 1,
                verify=verify, estimate=_abs_profile(estimate), draw=draw,
                max_subgraphs=max_subgraphs, deny=tuple(deny), layer_set=layer_set,
                min_compute_layers=min_compute_layers,
                quantize=_quantize_field(quantize.get(str(m)) if isinstance(quantize, Mapping)
                                         else quantize),
                **extra)
            for m, n, own in zip(models, names, per_model)]


def _quantize_field(quantize: Optional[Any]) -> Optional[Tuple[str, str, Tuple[str, ...]]]:
    """A Quantization as the plain values a Job carries (its calibration must be a path)."""
    if quantize is None:
        return None
    if not isinstance(quantize.calibration, (str, os.PathLike)):
        raise OptionError("convert_many(quantize=...): the calibration must be a file or "
                          "directory path (a reader or arrays cannot go to worker processes)")
    return (os.path.abspath(quantize.calibration), quantize.method, quantize.keep_fp16)


def shapes_per_model(shapes: Optional[Shapes], models: Sequence[Path]
                     ) -> Tuple[Dict[str, List[int]], List[Dict[str, List[int]]]]:
    """Split ``shapes`` into the all-model overrides and, per model, those of the patterns
    matching it. An OptionError for a pattern that matches no model, or two patterns that
    give one model's input two different shapes."""
    common: Dict[str, List[int]] = {}
    patterns: Dict[str, Dict[str, List[int]]] = {}
    for key, value in (shapes or {}).items():
        if isinstance(value, Mapping):
            for name, dims in value.items():
                _add_shapes(patterns.setdefault(key, {}), {name: shape_override(name, dims)},
                            key, None)
        elif "=" in key:  # "det*.onnx=images", as on the command line
            pattern, name = key.split("=", 1)
            _add_shapes(patterns.setdefault(pattern, {}), {name: shape_override(name, value)},
                        key, None)
        else:
            common[key] = shape_override(key, value)
    per_model: List[Dict[str, List[int]]] = [{} for _ in models]
    for pattern, given in patterns.items():
        hits = [k for k, m in enumerate(models) if model_matches(pattern, m)]
        if not hits:
            raise OptionError(f"input shapes for {pattern!r}: no model matches it (models: "
                              f"{', '.join(m.name for m in models[:5])}"
                              f"{', ...' if len(models) > 5 else ''})")
        for k in hits:
            _add_shapes(per_model[k], given, pattern, models[k])
    return common, per_model


def _add_shapes(own: Dict[str, List[int]], given: Mapping[str, List[int]], pattern: str,
                model: Optional[Path]) -> None:
    for name, dims in given.items():
        if name in own and own[name] != dims:
            where = f"of model {model}" if model is not None else f"of models {pattern!r}"
            raise OptionError(f"input {name!r} {where} is given two different shapes "
                              f"({own[name]} and {dims}, the latter by {pattern!r})")
        own[name] = dims


def model_matches(pattern: str, model: Path) -> bool:
    """A model's file name, stem, or path (as given or absolute) matches the glob ``pattern``."""
    candidates = (model.name, model.stem, model.as_posix(), Path(os.path.abspath(model)).as_posix())
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def _abs_profile(estimate: Optional[str]) -> Optional[str]:
    return estimate if estimate in (None, "builtin") else os.path.abspath(estimate)


def unique_names(paths: Sequence[Path]) -> List[str]:
    """safe_name(stem) per path; a name already taken gets _2, _3... (case-insensitively)."""
    taken = {SUMMARY_FILE.casefold()}
    names = []
    for path in paths:
        base = safe_name(path.stem)
        name, k = base, 2
        while name.casefold() in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name.casefold())
        names.append(name)
    return names


def _as_list(rules: Optional[Union[PathLike, Sequence[PathLike]]]) -> List[PathLike]:
    if rules is None:
        return []
    if isinstance(rules, (str, os.PathLike)):
        return [rules]
    return list(rules)


# ---- running ---------------------------------------------------------------------------------

def convert_many(models: Iterable[PathLike], out_dir: PathLike, *, jobs: Optional[int] = None,
                 executor: Optional[cf.Executor] = None,
                 shapes: Optional[Shapes] = None, policy: str = "multi",
                 rules: Optional[Union[PathLike, Sequence[PathLike]]] = None,
                 fail_fast: bool = False, progress: Optional[ProgressFn] = None,
                 verify: Union[bool, VerifyOptions] = False, estimate: Optional[str] = None,
                 draw: bool = False, max_subgraphs: Optional[int] = None,
                 deny: Sequence[str] = (), layer_set: str = "marvell",
                 min_compute_layers: int = 1,
                 on_stage: Optional[StageFn] = None,
                 quantize: Optional[Any] = None) -> BatchResult:
    """Convert every model into ``out_dir/<name>/`` and write ``out_dir/summary.json``.

    ``executor``: any ``concurrent.futures.Executor`` (used as is, not shut down). Without one,
    ``jobs == 1`` converts in this process and otherwise a ``ProcessPoolExecutor`` with
    ``jobs or os.cpu_count()`` workers (forkserver/spawn, safe with onnxruntime's threads) is used.
    ``shapes``: ``{"x": [1, 3, 224, 224]}`` for every model with an input ``x``, and
    ``{"det*.onnx": {"images": [...]}}`` (or ``{"det*.onnx=images": [...]}``, as on the
    command line) for the models a file name, stem or glob matches.
    ``verify``: True, or a :class:`VerifyOptions` (real inputs, tolerances); a model whose
    outputs are outside tolerance is ``verify_failed``, its artifacts kept.
    ``fail_fast``: after the first failure, models not yet started are ``skipped``.
    ``progress(outcome)`` is called in this thread as each model finishes; ``on_stage(name,
    stage)`` as a model starts its conversion ("convert"; on an executor, as a worker takes
    it) and, converted in this process, its verification ("verify").
    ``estimate`` ("builtin" or a hardware profile file) and ``draw`` are passed to ``convert``;
    so are ``max_subgraphs``, ``deny``, ``min_compute_layers`` and ``layer_set``, for every
    model, and ``quantize`` (a ``Quantization`` whose calibration is a path, or a mapping of
    model path, as given, to one); verify then compares with the QDQ model.
    A script that calls this with ``jobs != 1`` needs the usual ``if __name__ == "__main__":``
    guard (worker processes are started with forkserver/spawn, which re-import the main module).
    """
    models = list(models)
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise OptionError(f"jobs={jobs!r}: give a whole number of worker processes, at least 1 "
                          "(or None for one per CPU)")
    start = time.perf_counter()
    verify_options = verify if isinstance(verify, VerifyOptions) else None
    job_list = plan_jobs(models, out_dir, shapes=shapes, policy=policy, rules=_as_list(rules),
                         verify=bool(verify), estimate=estimate, draw=draw,
                         max_subgraphs=max_subgraphs, deny=deny, layer_set=layer_set,
                         min_compute_layers=min_compute_layers, verify_options=verify_options,
                         quantize=quantize)
    prepare_out_dir(out_dir)
    if executor is not None:
        outcomes = _run_on(executor, job_list, fail_fast, progress, on_stage)
    elif jobs == 1 or len(job_list) <= 1:
        outcomes = _run_inline(job_list, fail_fast, progress, on_stage)
    else:
        workers = min(jobs or os.cpu_count() or 1, len(job_list))
        severity = (verify_options or VerifyOptions()).log_severity if verify else None
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context(),
                                    initializer=_init_worker, initargs=(severity,)) as pool:
            outcomes = _run_on(pool, job_list, fail_fast, progress, on_stage)
    result = BatchResult(outcomes)
    write_summary(result, out_dir, seconds=time.perf_counter() - start,
                  options={"policy": policy, "shapes": _jsonable_shapes(shapes),
                           "rules": [str(r) for r in _as_list(rules)], "verify": bool(verify),
                           "max_subgraphs": max_subgraphs, "deny": list(deny),
                           "layer_set": layer_set,
                           **({} if min_compute_layers == 1
                              else {"min_compute_layers": min_compute_layers})})
    return result


def _mp_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _run_inline(jobs: List[Job], fail_fast: bool, progress: Optional[ProgressFn],
                on_stage: Optional[StageFn] = None) -> List[Outcome]:
    outcomes: List[Outcome] = []
    for job in jobs:
        if fail_fast and any(not o.ok for o in outcomes):
            outcomes.append(_skipped(job))
            continue
        outcome = convert_one(job, on_stage)
        outcomes.append(outcome)
        _report(progress, outcome)
    return outcomes


def _run_on(executor: cf.Executor, jobs: List[Job], fail_fast: bool,
            progress: Optional[ProgressFn], on_stage: Optional[StageFn] = None) -> List[Outcome]:
    futures = {executor.submit(convert_one, job): i for i, job in enumerate(jobs)}
    try:
        return _gather(futures, jobs, fail_fast, progress, on_stage)
    except BaseException:  # Ctrl-C: do not start the models still queued
        for future in futures:
            future.cancel()
        raise


def _gather(futures: Dict[cf.Future, int], jobs: List[Job], fail_fast: bool,
            progress: Optional[ProgressFn], on_stage: Optional[StageFn] = None
            ) -> List[Outcome]:
    outcomes: List[Optional[Outcome]] = [None] * len(jobs)
    stopping = False
    pending, started = set(futures), set()
    while pending:
        # With on_stage, wake up now and then to name the models a worker has taken.
        done, pending = cf.wait(pending, timeout=POLL_SECONDS if on_stage else None,
                                return_when=cf.FIRST_COMPLETED)
        for future in sorted(pending - started, key=futures.__getitem__):
            if on_stage is not None and future.running():
                started.add(future)
                _stage(on_stage, jobs[futures[future]], "convert")
        for future in sorted(done, key=futures.__getitem__):
            index = futures[future]
            if future.cancelled():
                outcomes[index] = _skipped(jobs[index])
                continue
            outcome = _collect(future, jobs[index])
            outcomes[index] = outcome
            _report(progress, outcome)
            if fail_fast and not outcome.ok and not stopping:
                stopping = True
                for other in futures:
                    other.cancel()  # only models not yet started are cancelled
    return [o if o is not None else _skipped(j) for o, j in zip(outcomes, jobs)]


def _collect(future: cf.Future, job: Job) -> Outcome:
    """The worker never raises; a dead worker process or an unpicklable result still might."""
    try:
        return future.result()
    except cf.CancelledError:
        return _skipped(job)
    except Exception as exc:
        return _failed(job, time.perf_counter(), exc, trace="".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _skipped(job: Job, why: str = "not converted: an earlier model failed (--fail-fast)"
             ) -> Outcome:
    return Outcome(job.model, job.name, SKIPPED, job.out_dir, error=why)


def _report(progress: Optional[ProgressFn], outcome: Outcome) -> None:
    if progress is not None:
        progress(outcome)


def _jsonable_shapes(shapes: Optional[Shapes]) -> Dict[str, Any]:
    def dims(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: [int(d) for d in v] for k, v in sorted(value.items())}
        return [int(d) for d in value]
    return {k: dims(v) for k, v in sorted((shapes or {}).items())}

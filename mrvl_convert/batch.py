"""Convert many models at once, on a process pool or on any ``concurrent.futures.Executor``.

``convert_many(models, out_dir)`` converts each model into ``out_dir/<name>/`` (``name`` is the file
stem made safe, with ``_2``, ``_3``... added in input order when two models would share it) and
writes ``out_dir/summary.json``. Each model runs in :func:`convert_one`, a top-level function that
takes a small picklable :class:`Job` and returns a small picklable :class:`Outcome`: it never
raises, so one bad model never stops the batch, and it works unchanged on a Dask or Ray executor
(``distributed.Client(...).get_executor()``).

Shape overrides (``shapes={"x": [1, 3, 224, 224]}``) apply to every model that has an input of that
name; in a batch of several models they are ignored for models that do not have it (a single model
given a name it lacks is an error, as in ``convert``).
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import __version__
from .errors import MrvlConvertError, OptionError, OutputDirError
from .load import safe_name, shape_override

PathLike = Union[str, os.PathLike]
ProgressFn = Callable[["Outcome"], None]
COUNT_KEYS = ("nodes", "mrvl_nodes", "cpu_nodes", "removed_nodes", "mrvl_subgraphs",
              "cpu_subgraphs", "transitions")
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Job:
    """Everything one worker needs: plain strings, lists and dicts only (cheap to pickle)."""
    model: str                      # absolute path of the ONNX file
    name: str                       # artifact directory name inside out_dir
    out_dir: str                    # absolute path of out_dir/<name>
    shapes: Optional[Dict[str, List[int]]] = None
    policy: str = "multi"
    rules: Tuple[str, ...] = ()
    ignore_unknown_shapes: bool = False
    verify: bool = False
    estimate: Optional[str] = None      # "builtin" or a hardware profile file: report.json estimate
    draw: bool = False                  # also write <name>.html and <name>.placement.onnx
    max_subgraphs: Optional[int] = None
    deny: Tuple[str, ...] = ()
    layer_set: str = "marvell"          # the layer kinds the target's backend compiler reads


@dataclass(frozen=True)
class Outcome:
    """What happened to one model. ``status`` is ``ok``, ``failed`` or ``skipped`` (fail-fast)."""
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
    verify_note: Optional[str] = None       # compare()'s one-line verdict when --verify passed
    mrvl_mac_share: Optional[float] = None
    cut_by: Tuple[Tuple[str, int], ...] = ()  # op types left on CPU, most nodes first

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def internal(self) -> bool:
        """True when the failure is a bug in mrvl_convert rather than a problem with the model."""
        return self.traceback is not None


class BatchResult(List[Outcome]):
    """The outcomes of a batch, in input order."""

    @property
    def ok(self) -> List[Outcome]:
        return [o for o in self if o.status == "ok"]

    @property
    def failed(self) -> List[Outcome]:
        return [o for o in self if o.status == "failed"]

    @property
    def skipped(self) -> List[Outcome]:
        return [o for o in self if o.status == "skipped"]

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self)


# ---- the worker ------------------------------------------------------------------------------

_interrupted = False  # set in a pool worker of ours by Ctrl-C: the jobs it still holds are skipped


def _init_worker() -> None:
    def on_sigint(signum, frame):
        global _interrupted
        _interrupted = True
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_sigint)


def convert_one(job: Job) -> Outcome:
    """Convert one model; every exception becomes a failed Outcome (top level: picklable)."""
    if _interrupted:
        return _skipped(job, "not converted: interrupted")
    start = time.perf_counter()
    ignored: Tuple[str, ...] = ()
    try:
        from .convert import convert
        shapes = job.shapes
        if shapes and job.ignore_unknown_shapes:
            shapes, ignored = _shapes_for(job.model, shapes)
        result = convert(job.model, job.out_dir, shapes=shapes, policy=job.policy,
                         rules=list(job.rules) or None, name=job.name, draw=job.draw,
                         estimate=(True if job.estimate == "builtin" else job.estimate),
                         max_subgraphs=job.max_subgraphs, deny=list(job.deny),
                         layer_set=job.layer_set)
        counts = {k: int(result.summary.get(k, 0)) for k in COUNT_KEYS}
        fragments = {"mrvl_mac_share": result.summary.get("mrvl_mac_share"),
                     "cut_by": tuple((c["op_type"], c["nodes"]) for c in result.report["cut_by"])}
        verify_note = _verify(job) if job.verify else None
    except VerifyError as exc:  # converted, but the comparison failed: the artifacts stay
        return replace(_failed(job, start, exc, ignored=ignored), counts=counts, verified=False,
                       **fragments)
    except MrvlConvertError as exc:
        return _failed(job, start, exc, ignored=ignored)
    except Exception as exc:  # a bug: report it with its traceback, never swallow it
        return _failed(job, start, exc, ignored=ignored, trace=traceback.format_exc())
    return Outcome(job.model, job.name, "ok", job.out_dir, counts, time.perf_counter() - start,
                   ignored_shapes=ignored, verified=True if job.verify else None,
                   verify_note=verify_note, **fragments)


def _failed(job: Job, start: float, exc: BaseException, *, ignored: Tuple[str, ...] = (),
            trace: Optional[str] = None) -> Outcome:
    message = " ".join(str(exc).split()) or type(exc).__name__
    if trace is not None:
        message = (f"internal error {type(exc).__name__}: {message} (a bug in mrvl_convert; "
                   "please report it with the model at the project's issue tracker)")
    if job.model not in message:
        message = f"model {job.model}: {message}"
    return Outcome(job.model, job.name, "failed", job.out_dir, {}, time.perf_counter() - start,
                   error=message, error_type=type(exc).__name__, traceback=trace,
                   ignored_shapes=ignored)


class VerifyError(MrvlConvertError):
    """The converted model's outputs do not match onnxruntime's on the original model."""


def _verify(job: Job) -> str:
    """Run the hybrid artifact against onnxruntime on the original model (``--verify``)."""
    from .runtime.compare import compare  # imported lazily: onnxruntime sessions, simulator
    report = compare(job.model, job.out_dir)
    if not report.passed:
        raise VerifyError(f"outputs differ from onnxruntime on the original model: "
                          f"{report.summary_line()[:400]}", model=job.model)
    return report.summary_line()


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

def plan_jobs(models: Sequence[PathLike], out_dir: PathLike, *,
              shapes: Optional[Mapping[str, Sequence[int]]] = None, policy: str = "multi",
              rules: Optional[Sequence[PathLike]] = None, verify: bool = False,
              estimate: Optional[str] = None, draw: bool = False,
              max_subgraphs: Optional[int] = None, deny: Sequence[str] = (),
              layer_set: str = "marvell") -> List[Job]:
    """One Job per model with a unique, deterministic artifact directory name."""
    out = Path(os.path.abspath(out_dir))
    shape_map = {k: shape_override(k, v) for k, v in (shapes or {}).items()} or None
    rule_paths = tuple(os.path.abspath(r) for r in _as_list(rules))
    names = unique_names([Path(m) for m in models])
    return [Job(model=os.path.abspath(m), name=n, out_dir=str(out / n), shapes=shape_map,
                policy=policy, rules=rule_paths, ignore_unknown_shapes=len(models) > 1,
                verify=verify, estimate=_abs_profile(estimate), draw=draw,
                max_subgraphs=max_subgraphs, deny=tuple(deny), layer_set=layer_set)
            for m, n in zip(models, names)]


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
                 shapes: Optional[Mapping[str, Sequence[int]]] = None, policy: str = "multi",
                 rules: Optional[Union[PathLike, Sequence[PathLike]]] = None,
                 fail_fast: bool = False, progress: Optional[ProgressFn] = None,
                 verify: bool = False, estimate: Optional[str] = None,
                 draw: bool = False, max_subgraphs: Optional[int] = None,
                 deny: Sequence[str] = (), layer_set: str = "marvell") -> BatchResult:
    """Convert every model into ``out_dir/<name>/`` and write ``out_dir/summary.json``.

    ``executor``: any ``concurrent.futures.Executor`` (used as is, not shut down). Without one,
    ``jobs == 1`` converts in this process and otherwise a ``ProcessPoolExecutor`` with
    ``jobs or os.cpu_count()`` workers (forkserver/spawn, safe with onnxruntime's threads) is used.
    ``fail_fast``: after the first failure, models not yet started are ``skipped``.
    ``progress(outcome)`` is called in this thread as each model finishes.
    ``estimate`` ("builtin" or a hardware profile file) and ``draw`` are passed to ``convert``;
    so are ``max_subgraphs``, ``deny`` and ``layer_set``, for every model.
    A script that calls this with ``jobs != 1`` needs the usual ``if __name__ == "__main__":``
    guard (worker processes are started with forkserver/spawn, which re-import the main module).
    """
    models = list(models)
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise OptionError(f"jobs={jobs!r}: give a whole number of worker processes, at least 1 "
                          "(or None for one per CPU)")
    start = time.perf_counter()
    job_list = plan_jobs(models, out_dir, shapes=shapes, policy=policy, rules=_as_list(rules),
                         verify=verify, estimate=estimate, draw=draw,
                         max_subgraphs=max_subgraphs, deny=deny, layer_set=layer_set)
    prepare_out_dir(out_dir)
    if executor is not None:
        outcomes = _run_on(executor, job_list, fail_fast, progress)
    elif jobs == 1 or len(job_list) <= 1:
        outcomes = _run_inline(job_list, fail_fast, progress)
    else:
        workers = min(jobs or os.cpu_count() or 1, len(job_list))
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context(),
                                    initializer=_init_worker) as pool:
            outcomes = _run_on(pool, job_list, fail_fast, progress)
    result = BatchResult(outcomes)
    write_summary(result, out_dir, seconds=time.perf_counter() - start,
                  options={"policy": policy, "shapes": _jsonable_shapes(shapes),
                           "rules": [str(r) for r in _as_list(rules)], "verify": verify,
                           "max_subgraphs": max_subgraphs, "deny": list(deny),
                           "layer_set": layer_set})
    return result


def _mp_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _run_inline(jobs: List[Job], fail_fast: bool, progress: Optional[ProgressFn]) -> List[Outcome]:
    outcomes: List[Outcome] = []
    for job in jobs:
        if fail_fast and any(not o.ok for o in outcomes):
            outcomes.append(_skipped(job))
            continue
        outcome = convert_one(job)
        outcomes.append(outcome)
        _report(progress, outcome)
    return outcomes


def _run_on(executor: cf.Executor, jobs: List[Job], fail_fast: bool,
            progress: Optional[ProgressFn]) -> List[Outcome]:
    futures = {executor.submit(convert_one, job): i for i, job in enumerate(jobs)}
    try:
        return _gather(futures, jobs, fail_fast, progress)
    except BaseException:  # Ctrl-C: do not start the models still queued
        for future in futures:
            future.cancel()
        raise


def _gather(futures: Dict[cf.Future, int], jobs: List[Job], fail_fast: bool,
            progress: Optional[ProgressFn]) -> List[Outcome]:
    outcomes: List[Optional[Outcome]] = [None] * len(jobs)
    stopping = False
    for future in cf.as_completed(futures):
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
    return Outcome(job.model, job.name, "skipped", job.out_dir, error=why)


def _report(progress: Optional[ProgressFn], outcome: Outcome) -> None:
    if progress is not None:
        progress(outcome)


# ---- summary.json ----------------------------------------------------------------------------

def prepare_out_dir(out_dir: PathLike) -> Path:
    """Create out_dir (and parents); an OutputDirError if that is impossible."""
    out = Path(out_dir)
    blocker = next((p for p in [out, *out.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputDirError(f"cannot write the output directory {out}: {blocker} is a file, "
                             "not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"cannot write the output directory {out}: "
                             f"{exc.strerror or exc}") from None
    return out


def summary_document(result: Sequence[Outcome], *, seconds: float,
                     options: Mapping[str, Any]) -> Dict[str, Any]:
    """summary.json's content (validated against schemas/summary.schema.json)."""
    models = []
    for o in result:
        written = bool(o.counts)  # ok, or converted but failed --verify
        entry: Dict[str, Any] = {"model": o.model, "name": o.name, "status": o.status,
                                 "out_dir": o.name if written else None}
        entry.update({k: (o.counts.get(k) if written else None) for k in COUNT_KEYS})
        entry["mrvl_mac_share"] = o.mrvl_mac_share if written else None
        entry.update(seconds=round(o.seconds, 3), error=o.error, error_type=o.error_type,
                     internal_error=o.internal, verified=o.verified,
                     ignored_shapes=list(o.ignored_shapes))
        if o.traceback:
            entry["traceback"] = o.traceback
        models.append(entry)
    totals = {"models": len(models), "ok": sum(o.status == "ok" for o in result),
              "failed": sum(o.status == "failed" for o in result),
              "skipped": sum(o.status == "skipped" for o in result)}
    return {"format_version": "1", "tool_version": __version__, "options": dict(options),
            "totals": totals, "seconds": round(seconds, 3), "models": models}


def write_summary(result: Sequence[Outcome], out_dir: PathLike, *, seconds: float,
                  options: Mapping[str, Any]) -> Path:
    """Validate and write out_dir/summary.json atomically (temp file + rename)."""
    from .emit.publish import dumps, umask
    from .emit.validate import validate
    document = summary_document(result, seconds=seconds, options=options)
    validate(document, "summary", label=SUMMARY_FILE)
    out = prepare_out_dir(out_dir)
    target = out / SUMMARY_FILE
    if target.is_dir() and not target.is_symlink():
        raise OutputDirError(f"cannot write {target}: it is a directory")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{SUMMARY_FILE}.tmp-", dir=out)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~umask())  # mkstemp made it 0600
            handle.write(dumps(document))
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputDirError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _jsonable_shapes(shapes: Optional[Mapping[str, Sequence[int]]]) -> Dict[str, List[int]]:
    return {k: [int(d) for d in v] for k, v in sorted((shapes or {}).items())}


def load_summary(out_dir: PathLike) -> Dict[str, Any]:
    return json.loads((Path(out_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))

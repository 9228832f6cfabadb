"""Convert many models at once, on a process pool or on any ``concurrent.futures.Executor``.

``convert_many(models, out_dir)`` converts each model into ``out_dir/<name>/`` (``name`` is the file
stem made safe, with ``_2``, ``_3``... added in input order when two models would share it) and
writes ``out_dir/summary.json``. Each model runs in ``worker.convert_one``, which never raises:
one bad model never stops the batch. The input shapes a model takes: ``plan``.

Statuses: ``ok``; ``verify_failed`` (converted and kept, but ``verify`` found an output outside
its tolerance); ``failed`` (not converted, nothing written); ``skipped`` (``fail_fast``).
``summary.json`` is merged with the one already in ``out_dir``: one row per model directory.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
import traceback
from dataclasses import replace
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from mrvl_convert.batch.outcome import BatchResult, Outcome
from mrvl_convert.batch.plan import BatchShapes, Job, PathLike, VerifyOptions, plan_jobs
from mrvl_convert.batch.summary import prepare_out_dir, write_summary
from mrvl_convert.batch.worker import (INTERRUPTED, StageFn, convert_one, failed, init_worker,
                                       inline_interrupts, skipped)
from mrvl_convert.errors import OptionError
from mrvl_convert.estimate.device import one_device
from mrvl_convert.options import ConvertOptions, Estimate, Rules
from mrvl_convert.quantize.recipe import Quantization

POLL_SECONDS = 0.5   # how often a pool run looks for models a worker has started
ProgressFn = Callable[[Outcome], None]
Quantize = Union[Quantization, Mapping[str, Quantization], None]


def convert_many(models: Iterable[PathLike], out_dir: PathLike, *, jobs: Optional[int] = None,
                 executor: Optional[cf.Executor] = None,
                 shapes: Optional[BatchShapes] = None, policy: str = "multi",
                 rules: Rules = None,
                 fail_fast: bool = False, progress: Optional[ProgressFn] = None,
                 verify: Union[bool, VerifyOptions] = False, estimate: Estimate = None,
                 draw: bool = False, max_subgraphs: Optional[int] = None,
                 deny: Sequence[str] = (), layer_set: str = "marvell",
                 min_compute_layers: int = 1,
                 on_stage: Optional[StageFn] = None,
                 quantize: Quantize = None, one_device: bool = False,
                 values: Optional[Mapping[str, Any]] = None,
                 foreign_int8: str = "requantize") -> BatchResult:
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
    ``one_device``: the models are to be loaded on one device together: the device check
    counts their model slots together (summary.json ``one_device`` and each row's
    ``fits_device``). ``values``: inputs pinned for the conversion, as ``convert`` takes them
    (every model must have them). ``foreign_int8``: as ``convert`` takes it.
    A script that calls this with ``jobs != 1`` needs the usual ``if __name__ == "__main__":``
    guard (worker processes are started with forkserver/spawn, which re-import the main module).
    """
    per_model = quantize if isinstance(quantize, Mapping) else None
    options = ConvertOptions(policy=policy, rules=rules, layer_set=layer_set,
                             max_subgraphs=max_subgraphs, deny=deny,
                             min_compute_layers=min_compute_layers, draw=draw,
                             estimate=True if estimate == "builtin" else estimate,
                             quantize=None if per_model is not None else quantize,
                             values=values, foreign_int8=foreign_int8)
    return run_batch(models, out_dir, options, shapes=shapes, quantize_per_model=per_model,
                     verify=verify, jobs=jobs, executor=executor, fail_fast=fail_fast,
                     progress=progress, on_stage=on_stage, one_device=one_device)


def run_batch(models: Iterable[PathLike], out_dir: PathLike, options: ConvertOptions, *,
              shapes: Optional[BatchShapes] = None,
              quantize_per_model: Optional[Mapping[str, Quantization]] = None,
              verify: Union[bool, VerifyOptions] = False, jobs: Optional[int] = None,
              executor: Optional[cf.Executor] = None, fail_fast: bool = False,
              progress: Optional[ProgressFn] = None,
              on_stage: Optional[StageFn] = None, one_device: bool = False) -> BatchResult:
    """``convert_many`` with the conversion's options built once by the caller (the command
    line); ``quantize_per_model`` as ``plan_jobs`` takes it. ``one_device``: the models are
    loaded on one device together, so the device check counts their model slots together."""
    models = list(models)
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise OptionError(f"jobs={jobs!r}: give a whole number of worker processes, at least 1 "
                          "(or None for one per CPU)")
    start = time.perf_counter()
    checks = verify if isinstance(verify, VerifyOptions) else (VerifyOptions() if verify else None)
    job_list = plan_jobs(models, out_dir, options, shapes=shapes, verify=checks,
                         quantize_per_model=quantize_per_model)
    prepare_out_dir(out_dir)
    summary_options = _summary_options(options, shapes, checks is not None)
    outcomes: List[Optional[Outcome]] = [None] * len(job_list)
    try:
        _execute(job_list, outcomes, executor, jobs, checks, fail_fast, progress, on_stage)
    except KeyboardInterrupt:
        # Ctrl-C: the models finished (and reported) so far keep their rows; no others.
        finished = [o for o in outcomes if o is not None and o.error != INTERRUPTED]
        if finished:
            write_summary(BatchResult(finished), out_dir, seconds=time.perf_counter() - start,
                          options=summary_options)
        raise
    result = BatchResult([o if o is not None else skipped(j) for o, j in zip(outcomes, job_list)])
    shared = None
    if one_device:
        summary_options["one_device"] = True
        result, shared = _on_one_device(result)
    write_summary(result, out_dir, seconds=time.perf_counter() - start, options=summary_options,
                  one_device=shared)
    return result


def _on_one_device(result: BatchResult) -> Tuple[BatchResult, Dict[str, Any]]:
    """The converted models' device check made together: their slots add up."""
    rows = {o.name: o.device for o in result if o.converted and o.device is not None}
    overall, shared = one_device(rows)
    return BatchResult([replace(o, device=shared[o.name]) if o.name in shared else o
                        for o in result]), overall


def _execute(job_list: List[Job], outcomes: List[Optional[Outcome]],
             executor: Optional[cf.Executor], jobs: Optional[int],
             checks: Optional[VerifyOptions], fail_fast: bool,
             progress: Optional[ProgressFn], on_stage: Optional[StageFn]) -> None:
    """Run the jobs, each one's Outcome into ``outcomes`` at its index as it finishes (so
    that on Ctrl-C the caller knows which ones did)."""
    if executor is not None:
        _run_on(executor, job_list, outcomes, fail_fast, progress, on_stage)
    elif jobs == 1 or len(job_list) <= 1:
        _run_inline(job_list, outcomes, fail_fast, progress, on_stage)
    else:
        workers = min(jobs or os.cpu_count() or 1, len(job_list))
        severity = None if checks is None else checks.log_severity
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context(),
                                    initializer=init_worker, initargs=(severity,)) as pool:
            _run_on(pool, job_list, outcomes, fail_fast, progress, on_stage)


def _summary_options(options: ConvertOptions, shapes: Optional[BatchShapes], verify: bool
                     ) -> Dict[str, Any]:
    """summary.json's ``options``: as the caller gave them (rule files as named, not made
    absolute; ``min_compute_layers`` only when it is not upstream's 1)."""
    written: Dict[str, Any] = {"policy": options.policy, "shapes": _jsonable_shapes(shapes),
                               "rules": [str(r) for r in options.rules], "verify": verify,
                               "max_subgraphs": options.max_subgraphs,
                               "deny": list(options.deny), "layer_set": options.layer_set}
    if options.min_compute_layers != 1:
        written["min_compute_layers"] = options.min_compute_layers
    return written


def _mp_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _run_inline(jobs: List[Job], outcomes: List[Optional[Outcome]], fail_fast: bool,
                progress: Optional[ProgressFn], on_stage: Optional[StageFn] = None) -> None:
    with inline_interrupts() as raise_if_held:
        for index, job in enumerate(jobs):
            raise_if_held()
            if fail_fast and any(o is not None and not o.ok for o in outcomes):
                outcomes[index] = skipped(job)
                continue
            outcome = convert_one(job, on_stage)
            if outcome.error == INTERRUPTED:
                raise KeyboardInterrupt
            outcomes[index] = outcome
            _report(progress, outcome)
        raise_if_held()


def _run_on(executor: cf.Executor, jobs: List[Job], outcomes: List[Optional[Outcome]],
            fail_fast: bool, progress: Optional[ProgressFn],
            on_stage: Optional[StageFn] = None) -> None:
    futures = {executor.submit(convert_one, job): i for i, job in enumerate(jobs)}
    try:
        _gather(futures, jobs, outcomes, fail_fast, progress, on_stage)
    except BaseException:  # Ctrl-C: do not start the models still queued
        for future in futures:
            future.cancel()
        _collect_late(futures, outcomes, progress)
        raise


def _collect_late(futures: Dict[cf.Future, int], outcomes: List[Optional[Outcome]],
                  progress: Optional[ProgressFn]) -> None:
    """After Ctrl-C: wait for the models the workers had started (each stops, or finishes
    and publishes); those that finished are reported and recorded, as if not interrupted."""
    cf.wait(futures)
    for future, index in sorted(futures.items(), key=lambda item: item[1]):
        if outcomes[index] is not None or future.cancelled() or future.exception() is not None:
            continue
        outcome = future.result()
        if outcome.error != INTERRUPTED:
            outcomes[index] = outcome
            _report(progress, outcome)


def _gather(futures: Dict[cf.Future, int], jobs: List[Job], outcomes: List[Optional[Outcome]],
            fail_fast: bool, progress: Optional[ProgressFn],
            on_stage: Optional[StageFn] = None) -> None:
    stopping = False
    pending, started = set(futures), set()
    while pending:
        # With on_stage, wake up now and then to name the models a worker has taken.
        done, pending = cf.wait(pending, timeout=POLL_SECONDS if on_stage else None,
                                return_when=cf.FIRST_COMPLETED)
        for future in sorted(pending - started, key=futures.__getitem__):
            if on_stage is not None and future.running():
                started.add(future)
                on_stage(jobs[futures[future]].name, "convert")
        for future in sorted(done, key=futures.__getitem__):
            index = futures[future]
            if future.cancelled():
                outcomes[index] = skipped(jobs[index])
                continue
            outcome = _collect(future, jobs[index])
            outcomes[index] = outcome
            _report(progress, outcome)
            if fail_fast and not outcome.ok and not stopping:
                stopping = True
                for other in futures:
                    other.cancel()  # only models not yet started are cancelled


def _collect(future: cf.Future, job: Job) -> Outcome:
    """The worker never raises; a dead worker process or an unpicklable result still might."""
    try:
        return future.result()
    except cf.CancelledError:
        return skipped(job)
    except Exception as exc:
        return failed(job, time.perf_counter(), exc, trace="".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _report(progress: Optional[ProgressFn], outcome: Outcome) -> None:
    if progress is not None:
        progress(outcome)


def _jsonable_shapes(shapes: Optional[BatchShapes]) -> Dict[str, Any]:
    def dims(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: [int(d) for d in v] for k, v in sorted(value.items())}
        return [int(d) for d in value]
    return {k: dims(v) for k, v in sorted((shapes or {}).items())}

"""Many models at once: ``convert_many`` (``pool``) plans one ``Job`` per model (``plan``), runs
each in ``convert_one`` (``worker``), collects an ``Outcome`` per model (``outcome``) and writes
OUT/summary.json (``summary``)."""
from __future__ import annotations

from mrvl_convert.batch.outcome import COUNT_KEYS, BatchResult, Outcome
from mrvl_convert.batch.plan import Job, VerifyOptions, plan_jobs, shapes_per_model, unique_names
from mrvl_convert.batch.pool import convert_many, run_batch
from mrvl_convert.batch.summary import (SUMMARY_FILE, load_summary, prepare_out_dir,
                                        summary_document, write_summary)
from mrvl_convert.batch.worker import VerifyError, convert_one

__all__ = ["BatchResult", "Job", "Outcome", "VerifyError", "VerifyOptions", "convert_many",
           "convert_one", "load_summary", "plan_jobs", "prepare_out_dir", "run_batch",
           "shapes_per_model", "summary_document", "unique_names", "write_summary",
           "SUMMARY_FILE", "COUNT_KEYS"]

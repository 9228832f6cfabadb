"""Planning a batch (``mrvl_convert.batch.plan``): each Job carries the conversion's options
whole, picklable, with the files they name made absolute."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from mrvl_convert.batch import Job, VerifyOptions, plan_jobs
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization


def test_every_job_carries_the_options_with_its_own_name(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = ConvertOptions(rules=["extra.yaml"], deny=["Sigmoid"], max_subgraphs=2,
                             estimate="profile.yaml", quantize=Quantization("cal.npz"))
    jobs = plan_jobs(["a/net.onnx", "b/net.onnx"], "out", options,
                     verify=VerifyOptions(inputs="in.npz"))
    assert [j.name for j in jobs] == ["net", "net_2"]
    assert [j.options.name for j in jobs] == ["net", "net_2"]
    assert [j.out_dir for j in jobs] == [str(tmp_path / "out" / "net"),
                                        str(tmp_path / "out" / "net_2")]
    for job in jobs:
        assert job.options.rules == (str(tmp_path / "extra.yaml"),)
        assert job.options.estimate == str(tmp_path / "profile.yaml")
        assert job.options.quantize == Quantization(str(tmp_path / "cal.npz"))
        assert (job.options.deny, job.options.max_subgraphs) == (("Sigmoid",), 2)
        assert job.verify == VerifyOptions(inputs=str(tmp_path / "in.npz"))
        assert pickle.loads(pickle.dumps(job)) == job


def test_a_quantization_per_model_replaces_the_common_one(tmp_path: Path) -> None:
    cal = str(tmp_path / "cal.npz")
    per_model = {"a.onnx": Quantization(cal, keep_fp16=("conv",))}
    a, b = plan_jobs(["a.onnx", "b.onnx"], tmp_path / "out",
                     ConvertOptions(quantize=Quantization(cal)), quantize_per_model=per_model)
    assert a.options.quantize.keep_fp16 == ("conv",)
    assert b.options.quantize is None  # a model the mapping leaves out is not quantized


def test_input_shapes_are_given_per_batch_not_in_the_options(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="shapes="):
        plan_jobs(["a.onnx"], tmp_path / "out", ConvertOptions(shapes={"x": [1, 3, 8, 8]}))
    [job] = plan_jobs(["a.onnx"], tmp_path / "out", shapes={"x": [1, 3, 8, 8]})
    assert (job.shapes, job.options.shapes) == ({"x": [1, 3, 8, 8]}, None)


def test_a_job_is_planned_without_reading_the_model(tmp_path: Path) -> None:
    [job] = plan_jobs([tmp_path / "missing.onnx"], tmp_path / "out")
    assert isinstance(job, Job) and job.model == os.path.abspath(tmp_path / "missing.onnx")

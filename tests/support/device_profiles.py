"""Hardware profiles for tests: the built-in one with its device's ``max_batch`` changed."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from mrvl_convert.estimate import load_profile


def profile_of_batch(directory: Path, max_batch: int) -> str:
    """A profile file in ``directory``: the built-in profile (``max_batch`` 1, a TVM-built
    model) with the device's ``max_batch`` set; its path, for ``convert(estimate=...)``."""
    text = resources.files("mrvl_convert.estimate").joinpath("cn10ka_fp16.yaml").read_text()
    path = Path(directory) / f"max_batch_{max_batch}.yaml"
    path.write_text(text.replace("max_batch: 1 ", f"max_batch: {max_batch} "))
    assert load_profile(path).device.max_batch == max_batch
    return str(path)

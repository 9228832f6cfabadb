"""Hypothesis profiles for the fuzz tests.

- ``quick`` (default): few examples, derandomized so CI runs are reproducible.
- ``thorough``: ``pytest --hypothesis-profile thorough tests/system/test_fuzz_*.py`` (thousands
  of examples).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "quick",
    max_examples=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=2500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Every document the converter writes in a test is checked against its schema as it is written
# (``mrvl_convert.emit.validate.self_check``); a test that needs it off unsets it itself.
os.environ.setdefault("MRVL_CONVERT_SELF_CHECK", "1")
# Only a default: hypothesis' pytest plugin loads --hypothesis-profile after conftest is imported.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))

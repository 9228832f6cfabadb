"""``estimate/profile.load_profile(None)``: the built-in profile read once per process gives
the profile parsed afresh from its file, field for field, and nothing can change it."""
from __future__ import annotations

import dataclasses
from importlib import resources

import pytest
import yaml

from mrvl_convert.estimate.profile import BUILTIN_PROFILE, load_profile, parse_profile


def test_the_builtin_profile_is_the_file_parsed_afresh():
    text = resources.files("mrvl_convert.estimate").joinpath(BUILTIN_PROFILE).read_text()
    fresh = parse_profile(yaml.safe_load(text), label=f"built-in {BUILTIN_PROFILE}")
    first, again = load_profile(None), load_profile(None)
    assert first == fresh and again == fresh
    assert first.as_dict() == fresh.as_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.clock_hz = 1.0  # type: ignore[misc]
    for field in dataclasses.fields(first):  # nothing mutable to share between conversions
        assert not isinstance(getattr(first, field.name), (dict, list, set)), field.name

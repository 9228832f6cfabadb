"""The mrvl-convert command's argument parsing (cli/convert.py); the command end to end:
tests/system/test_cli_end_to_end.py."""
from __future__ import annotations

import pytest

from mrvl_convert.cli.args import UsageError, parse_shapes


def test_parse_shapes() -> None:
    assert parse_shapes(["x:1,3,8,8", "in:put:2,4"]) == {"x": [1, 3, 8, 8], "in:put": [2, 4]}
    for bad in ("x", "x:", ":1", "x:1,a", "x:1.5", "x:0,3"):
        with pytest.raises(UsageError):
            parse_shapes([bad])
    with pytest.raises(UsageError, match="two different shapes"):
        parse_shapes(["x:1,2", "x:1,3"])

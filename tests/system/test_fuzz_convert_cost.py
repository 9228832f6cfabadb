"""core/cleanup.py against graphsurgeon's own cleanup on random graphs: the same nodes kept in
the same order, the same tensors disconnected. Quick profile by default."""
from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings

from mrvl_convert.core.cleanup import cleanup
from support.strategies.convert_cost import described, graph_from_spec, graph_specs

pytestmark = pytest.mark.system

_SOME = settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)


@_SOME
@given(graph_specs())
def test_cleanup_is_graphsurgeons(spec) -> None:
    logging.getLogger("onnx_graphsurgeon").setLevel(logging.ERROR)
    theirs, made_theirs = graph_from_spec(spec)
    ours, made_ours = graph_from_spec(spec)
    theirs_error = ours_error = None
    try:
        theirs.cleanup(remove_unused_graph_inputs=False)
    except Exception as exc:  # noqa: BLE001  graphsurgeon's error for a stray node
        theirs_error = type(exc)
    try:
        assert cleanup(ours) is ours
    except Exception as exc:  # noqa: BLE001
        ours_error = type(exc)
    assert ours_error == theirs_error
    if theirs_error is None:
        assert described(ours, made_ours) == described(theirs, made_theirs)

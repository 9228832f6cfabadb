"""canonical_forms.Names: the same fresh names as before, in tries linear in the names asked
for (an unrolled cell asks for the same base thousands of times)."""
from __future__ import annotations

import onnx_graphsurgeon as gs
import numpy as np

from mrvl_convert.frontend.canonical_forms import Names


class _Counting(set):
    """A set that counts the membership tests made on it."""
    tests = 0

    def __contains__(self, item) -> bool:
        type(self).tests += 1
        return super().__contains__(item)


def _graph() -> gs.Graph:
    x = gs.Variable("x", np.float32, [1, 4])
    taken = [gs.Variable(name, np.float32, [1, 4]) for name in ("a", "a_1", "a_3", "b_2")]
    nodes = [gs.Node("Relu", "a_2", inputs=[x], outputs=[taken[0]])]
    nodes += [gs.Node("Relu", f"n{i}", inputs=[taken[i]], outputs=[taken[i + 1]])
              for i in range(3)]
    return gs.Graph(nodes=nodes, inputs=[x], outputs=[taken[-1]])


def test_fresh_names_skip_every_taken_one() -> None:
    names = Names(_graph())
    asked = [names.fresh(base) for base in ("a", "b", "a", "b", "a", "b", "a", "c")]
    assert asked == ["a_4", "b", "a_5", "b_1", "a_6", "b_3", "a_7", "c"]
    names.used.add("c_1")  # a name taken after the fact is skipped too
    assert names.fresh("c") == "c_2"


def test_asking_for_one_base_n_times_tries_about_n_names() -> None:
    names = Names(_graph())
    names.used = _Counting(names.used)
    _Counting.tests = 0
    asked = [names.fresh("step") for _ in range(2000)]
    assert asked == ["step"] + [f"step_{k}" for k in range(1, 2000)]
    assert _Counting.tests <= 2 * 2000, _Counting.tests

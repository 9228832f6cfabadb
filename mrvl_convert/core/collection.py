"""Python's cyclic garbage collector paused while one conversion runs.

A conversion builds a graph of tens of thousands of linked objects (graphsurgeon's nodes and
tensors, bindings, composites, units) that all live until it ends. The collector's full
collections scan every tracked object, and it runs one each time the objects that survived
grew by a quarter: on an unrolled recurrent cell's graph (plcmos_v2: ~7,400 nodes) eight full
collections took about half of the conversion's time, and found little to free (what a
conversion makes, it keeps until it returns).

Requires: nothing. Ensures: while a ``@paused_collection`` function runs, the automatic
collector does not (reference counting still frees every acyclic object at once); on leaving,
it runs again if it ran on entering, and collects the cycles made meanwhile on its next pass.
Where it was off on entering (the caller's choice, or another thread's conversion pausing it),
it is left as it is. Cost: the cyclic garbage of one conversion is held to its end (six corpus
models converted in one process, plcmos_v2 and rec-model among them: peak RSS 851 -> 856 MiB).
"""
from __future__ import annotations

import functools
import gc
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def paused_collection(function: F) -> F:
    """``function`` run with the collector off. A plain wrapper in this package, not a
    ``contextlib`` one: a warning that points at the first caller outside the package
    (``input_shapes._outside_package``) still finds the user's line."""
    @functools.wraps(function)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()
    return paused  # type: ignore[return-value]

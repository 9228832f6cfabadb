"""Strategies for ``emit/json_text.py``: JSON documents as the converter builds them (nested
dicts, lists and tuples of any depth, empty ones, flat ones of scalars next to nested ones) with
every scalar the standard encoder takes: strings with quotes, backslashes, control characters,
brackets, separators and non-ASCII text; ints (bools among them), floats (NaN, the infinities,
-0.0, subnormals), None; and the non-string keys it converts."""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from support.strategies.batch import MIXING, PER_SAMPLE, batch_from_spec

# Text that looks like the separators and brackets the encoder cuts at, inside strings.
_TRICKY = st.sampled_from(["]", "[", "}", "{", ",\n  ", "],\n  [", "\x00", "\"", "\\", "é",
                           "\u2028", "\U0001F600", ": ", ""])
_TEXT = st.one_of(st.text(max_size=8), st.lists(_TRICKY, max_size=4).map("".join))
SCALARS = st.one_of(_TEXT, st.integers(-2 ** 70, 2 ** 70), st.booleans(), st.none(),
                    st.floats(allow_nan=True, allow_infinity=True), st.just(-0.0),
                    st.just(5e-324))
KEYS = st.one_of(_TEXT, st.integers(-5, 5), st.floats(allow_nan=False, width=32),
                 st.booleans(), st.none())


def documents(max_leaves: int = 60) -> st.SearchStrategy[Any]:
    """A JSON document: a scalar or containers nested to any depth."""
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=5),
                                st.lists(inner, max_size=4).map(tuple),
                                st.dictionaries(KEYS, inner, max_size=5)),
        max_leaves=max_leaves)


@st.composite
def any_batch_models(draw):
    """``strategies/batch.py``'s CNNs at any batch, 1 to 16: at or below the device's limit
    (where a stage's boundary decides ``batch_runs``) and above it (where the scan does)."""
    spec = {"seed": draw(st.integers(0, 2 ** 16)), "batch": draw(st.integers(1, 16)),
            "channels": draw(st.sampled_from([2, 4])),
            "ops": draw(st.lists(st.sampled_from(PER_SAMPLE), max_size=3)),
            "mixing": draw(st.one_of(st.none(), st.sampled_from(MIXING)))}
    return batch_from_spec(spec)

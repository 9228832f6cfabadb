"""A generated change of a document, as hypothesis shows it in a report."""
from __future__ import annotations


class Mutation(tuple):
    """A mutated document and what to expect of it; shown by its description (the last item)."""

    def __repr__(self) -> str:
        return f"<mutation: {self[-1]}>"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

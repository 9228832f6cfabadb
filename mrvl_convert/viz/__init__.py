"""Pictures of the partition: an HTML page of the graph, and the model annotated for Netron.

``describe(proto, report)`` turns the report's placements into a drawable graph,
``render_page(description)`` makes the self-contained HTML page (ELK layout in the browser), and
``annotate(proto, report)`` gives ``<model>.placement.onnx``.
"""
from __future__ import annotations

from mrvl_convert.viz.graph import describe
from mrvl_convert.viz.page import render_page
from mrvl_convert.viz.placement import annotate

__all__ = ["describe", "render_page", "annotate"]

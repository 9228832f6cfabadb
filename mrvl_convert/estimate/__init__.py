"""An accelerator cost ESTIMATE per Mrvl layer, stage and boundary (docs/ESTIMATE.md).

``estimate_artifact(dir)`` reads an artifact directory; ``estimate_stage(nodes_doc, profile)``
weighs one Mrvl stage (for partitioners); ``load_profile(path)`` reads a hardware profile file.
"""
from __future__ import annotations

from mrvl_convert.estimate.artifact import NOTE, estimate_artifact, estimate_documents, format_table
from mrvl_convert.estimate.cost import LayerEstimate, StageEstimate, boundary_cycles, estimate_stage
from mrvl_convert.estimate.profile import HardwareProfile, HardwareProfileError, load_profile

__all__ = ["NOTE", "estimate_artifact", "estimate_documents", "format_table", "LayerEstimate",
           "StageEstimate", "boundary_cycles", "estimate_stage", "HardwareProfile",
           "HardwareProfileError", "load_profile"]

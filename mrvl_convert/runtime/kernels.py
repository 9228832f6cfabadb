"""The simulator's kernel table: one numpy kernel class per Marvell ``layer_name``.

An explicit dict literal, not registration by import side effect: what the simulator can run
is readable in one place. The kernels themselves live in ``kernels_conv`` (Conv2D, FC),
``kernels_pool`` (pooling) and ``kernels_misc`` (layout, elementwise, data movement).
"""
from __future__ import annotations

from typing import Dict, Type

from .kernel_base import Kernel
from .kernels_conv import FC, Conv2D
from .kernels_misc import Concat, LayoutTransform, Reshape, Sum2D
from .kernels_pool import Avgpool2D, GlobalAvgpool2D, GlobalMaxpool2D, Maxpool2D

KERNELS: Dict[str, Type[Kernel]] = {
    "layout_transform": LayoutTransform,
    "Conv2D": Conv2D,
    "FC": FC,
    "Maxpool2D": Maxpool2D,
    "Avgpool2D": Avgpool2D,
    "GlobalAvgpool2D": GlobalAvgpool2D,
    "GlobalMaxpool2D": GlobalMaxpool2D,
    "Sum2D": Sum2D,
    "Concat": Concat,
    "reshape": Reshape,
    "nn.batch_flatten": Reshape,
    "squeeze": Reshape,
}

__all__ = ["KERNELS", "Kernel"]

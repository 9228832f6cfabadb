"""int8 by Marvell's recipe: calibration data read as hostile input, weights written as nodes made
initializers, BatchNormalization folded, named nodes kept in float, ``quantize_static`` in QDQ
form. What ``convert(quantize=...)`` takes."""
from __future__ import annotations

from mrvl_convert.quantize.recipe import (CALIBRATION_METHODS, Quantization, load_calibration,
                                          quantize_int8, quantized_model, recipe)

__all__ = ["CALIBRATION_METHODS", "Quantization", "load_calibration", "quantize_int8",
           "quantized_model", "recipe"]

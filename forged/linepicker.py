"""The old import path of the line picker (`[distiller] class = "forged.linepicker:LinePicker"`):
configurations written before the layer packages load it here still."""

from __future__ import annotations

from forged.distill.linepicker import LinePicker

__all__ = ["LinePicker"]

"""The old import path of what a plugin is created with (`forged.plugins.ObserverContext`):
plugins written before the layer packages import it here still; new ones use `forged.plugin_api`."""

from __future__ import annotations

from forged.observing.plugins import ObserverContext, StoreView

__all__ = ["ObserverContext", "StoreView"]

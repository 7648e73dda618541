"""Observer plugins shipped with forged, enabled in config like any other plugin."""

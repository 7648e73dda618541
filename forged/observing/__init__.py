"""The observing layer of forged."""

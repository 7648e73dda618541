"""The scrub layer of forged."""

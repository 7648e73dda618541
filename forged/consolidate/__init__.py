"""The consolidate layer of forged."""

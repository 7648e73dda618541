"""The cli layer of forged."""

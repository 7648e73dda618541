"""The daemon layer of forged."""

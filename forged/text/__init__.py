"""The text layer of forged."""

"""The client layer of forged."""

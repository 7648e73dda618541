"""The recall layer of forged."""

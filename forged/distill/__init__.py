"""The distill layer of forged."""

"""The store layer of forged."""

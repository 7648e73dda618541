"""The http layer of forged."""

"""Tests of forged.index."""

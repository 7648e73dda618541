"""Tests of forged.consolidate."""

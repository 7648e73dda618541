"""Tests of forged.observers."""

"""Tests of forged.cli."""

"""Tests of forged.recall."""

"""Tests of forged.store."""

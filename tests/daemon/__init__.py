"""Tests of forged.daemon."""

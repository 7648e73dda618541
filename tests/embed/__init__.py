"""Tests of forged.embed."""

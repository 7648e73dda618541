"""Tests of forged.text."""

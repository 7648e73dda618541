"""Tests of forged.ui."""

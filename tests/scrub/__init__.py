"""Tests of forged.scrub."""

"""Tests of forged.ingest."""

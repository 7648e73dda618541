"""Tests of forged.client."""

"""Tests of forged.http."""

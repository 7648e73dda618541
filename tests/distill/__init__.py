"""Tests of forged.distill."""

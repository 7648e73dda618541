"""Tests of forged.llm."""

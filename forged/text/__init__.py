"""Deterministic measures of text shared by distilling and recall: token estimates, and the
grounding check that a distilled text says only what its sources say."""

"""Distilling: batches of interactions become summaries and typed facts, through the distill
observer, its dead letters and their re-run, or the model-free line picker."""

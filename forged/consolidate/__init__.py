"""Consolidation: a scope's current facts judged by a model (merge, supersede, keep), the
observer that runs it and its route's work, and the condensing of old summaries."""

"""Recall by meaning: the embedding model, vectors as the store keeps them, and the index that
scores them against a query."""

__all__: list[str] = []

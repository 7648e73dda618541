"""The embed observer: vectors for recall by meaning, stored as turns, facts and summaries are."""

__all__: list[str] = []

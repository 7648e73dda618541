"""The llm layer of forged."""

"""What the tests share: daemons, a fake LLM, PostgreSQL, data and oracles; only the tests and bench/ import it."""

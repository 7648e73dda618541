"""The ingest layer of forged."""

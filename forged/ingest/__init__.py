"""Ingest: a request body becomes checked, scrubbed interactions, admitted against the backlog
and committed to the log together with the pushes queued beside it."""

"""The model boundary: the `Distiller` protocol and its OpenAI-compatible client, the words sent
(prompt), the reading of what came back (answer) and the one loop that retries it (retry)."""

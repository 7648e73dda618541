"""The model boundary: the `Distiller` protocol and its OpenAI-compatible client, the words sent
(prompt) and the reading of what came back (answer)."""

"""The model boundary: the `Distiller` protocol and its OpenAI-compatible client, the words sent
(prompt), the reading of what came back (answer) and the one loop that retries it (retry)."""

from __future__ import annotations

from forged.surface import lazy_surface

# What other packages import from this one, by the module that defines it, loaded on first
# use (tests/test_architecture.py holds every import across packages to this surface).
_SURFACE: dict[str, str | None] = {
    "Distiller": "distiller",
    "GUIDED_SUMMARY_CHARS": "prompt",
    "KNOWN_ID": "prompt",
    "LINE_ID": "prompt",
    "ModeMemory": "distiller",
    "OpenAIDistiller": "distiller",
    "RetryPolicy": "retry",
    "StatusSink": "retry",
    "Task": "distiller",
    "UNWATCHED": "retry",
    "decode_answer": "answer",
    "message_lines": "prompt",
    "render_chunks": "prompt",
    "render_known": "prompt",
    "render_transcript": "prompt",
    "retried": "retry",
    "speaker": "prompt",
    "timed": "retry",
}
__all__ = [
    "GUIDED_SUMMARY_CHARS",
    "KNOWN_ID",
    "LINE_ID",
    "UNWATCHED",
    "Distiller",
    "ModeMemory",
    "OpenAIDistiller",
    "RetryPolicy",
    "StatusSink",
    "Task",
    "decode_answer",
    "message_lines",
    "render_chunks",
    "render_known",
    "render_transcript",
    "retried",
    "speaker",
    "timed",
]
__getattr__ = lazy_surface(__name__, _SURFACE)

"""Consolidation: a scope's current facts judged by a model (merge, supersede, keep), the
observer that runs it and its route's work, and the condensing of old summaries."""

from __future__ import annotations

from forged.consolidate.judgement import CurrentFact, ProposedChange, Proposer

__all__ = ["CurrentFact", "ProposedChange", "Proposer"]

"""Whether a score reaches a threshold: one comparison and one tolerance, for every verdict.

Weighted means are float sums: a score that reaches its threshold may land a hair under it
(0.7999999999999999 for 0.8). So a score within ``TOLERANCE`` of a threshold reaches it, and a
threshold at or below ``TOLERANCE`` is reached by every score, so it would pass every answer:
the configuration models refuse it (``passing_threshold``).

Standard library only (the verdict's hot path reads it).
"""

from __future__ import annotations

__all__ = ["TOLERANCE", "passing_threshold", "reaches"]

TOLERANCE = 1e-9


def reaches(score: float, threshold: float) -> bool:
    """Does ``score`` reach ``threshold`` (within ``TOLERANCE``)?"""
    return score >= threshold - TOLERANCE


def passing_threshold(threshold: float) -> float:
    """``threshold``, if some score can miss it; a ``ValueError`` saying why not otherwise."""
    if threshold <= TOLERANCE:
        raise ValueError(
            f"threshold {threshold:g} holds for every answer (every score reaches it): "
            "give one above 0"
        )
    return threshold

"""Embedding providers: text -> unit-length vectors, with the model's name and dimension.

Every stored embedding carries its model's name; vectors of two models are never compared
(DESIGN.md, invariant 7). `HashEmbedder` is deterministic and needs nothing (tests, and the
fallback when no model is installed); the local and OpenAI providers live in
`models.memory.embedders`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from typing import Protocol

TOKEN = re.compile(r"[a-z0-9]+")


class Embedder(Protocol):
    """Turns texts into vectors of `dim` floats with unit L2 norm."""

    model: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashEmbedder:
    """Feature hashing of words and word bigrams (Weinberger et al., ICML 2009): deterministic,
    lexical (no synonyms), dimension `dim`. Texts with no words embed to a fixed unit vector."""

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.model = f"hash-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text."""
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> list[float]:
        words = TOKEN.findall(text.lower())
        vector = [0.0] * self.dim
        for feature in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        return normalize(vector) if any(vector) else [1.0] + [0.0] * (self.dim - 1)


def normalize(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to unit L2 norm."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]

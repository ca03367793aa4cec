"""Byte-level tokenizer for the language-model experiments.

No installed package provides the GPT-2 BPE vocabulary offline (``tiktoken``, ``tokenizers`` and
``transformers`` are not dependencies of gradflow), so text is tokenised into its UTF-8 bytes:
token ids 0..255 are the bytes and 256 is ``<|endoftext|>``, a vocabulary of 257.

Perplexities measured with this tokenizer are **per byte** and are not comparable with the
GPT-2-BPE perplexities of the InRank paper (19.3 for GPT-2 small on WikiText-103): a BPE token
covers several bytes, so per-token perplexity is much larger than per-byte perplexity. Every
metrics record written by gradflow carries ``tokenizer_name`` so this cannot be lost.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ByteTokenizer", "BYTE_TOKENIZER"]


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 bytes as tokens, plus an end-of-text token.

    Attributes:
        name: ``"byte"``, recorded with every metric.
        vocab_size: 257 (256 bytes and ``<|endoftext|>``).
        eot: the id of ``<|endoftext|>`` (256).
    """

    name: str = "byte"
    vocab_size: int = 257
    eot: int = 256

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as a ``uint16`` array (its UTF-8 bytes)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def encode_documents(self, documents) -> np.ndarray:
        """Concatenated ids of several documents, each followed by ``<|endoftext|>``."""
        parts = []
        for doc in documents:
            parts.append(self.encode(doc))
            parts.append(np.array([self.eot], dtype=np.uint16))
        if not parts:
            return np.zeros((0,), dtype=np.uint16)
        return np.concatenate(parts)

    def decode(self, ids) -> str:
        """Text of token ids; ``<|endoftext|>`` becomes a newline, invalid UTF-8 is replaced."""
        ids = np.asarray(ids)
        if ids.ndim != 1:
            raise ValueError(f"decode expects a 1-D array of ids, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}")
        ids = np.where(ids == self.eot, ord("\n"), ids).astype(np.uint8)
        return ids.tobytes().decode("utf-8", errors="replace")


BYTE_TOKENIZER = ByteTokenizer()

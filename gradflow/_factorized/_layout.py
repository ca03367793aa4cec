"""The factors of a factorised model as one flat vector ``y = [vec U_1, vec V_1, vec U_2, …]``, padded to the full
widths (inactive columns are exactly zero and masked), so that a whole greedy path compiles once."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each factor lives in the flat vector ``y = [vec U_1, vec V_1, vec U_2, …]``."""

    shapes: tuple[tuple[int, int], ...]
    widths: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum((m + n) * k for (m, n), k in zip(self.shapes, self.widths))

    def split(self, y):
        """The factors ``(U_j, V_j)`` of a flat vector (NumPy or JAX)."""
        out, start = [], 0
        for (m, n), k in zip(self.shapes, self.widths):
            u = y[start : start + m * k].reshape(m, k)
            v = y[start + m * k : start + (m + n) * k].reshape(n, k)
            out.append((u, v))
            start += (m + n) * k
        return out

    def products(self, y):
        return tuple(u @ v.T for u, v in self.split(y))

    def flat(self, factors) -> np.ndarray:
        return np.concatenate([np.concatenate([u.ravel(), v.ravel()]) for u, v in factors])

    @property
    def columns(self) -> np.ndarray:
        """The factor column (numbered over all factors) of every entry of y."""
        ids, start = [], 0
        for (m, n), k in zip(self.shapes, self.widths):
            col = start + np.arange(k)
            ids.append(np.concatenate([np.broadcast_to(col, (m, k)).ravel(), np.broadcast_to(col, (n, k)).ravel()]))
            start += k
        return np.concatenate(ids)

    def mask(self, ranks) -> np.ndarray:
        """True on the first ``ranks[j]`` columns of every factor."""
        cols = [np.arange(k) < r for k, r in zip(self.widths, ranks)]
        return self.flat(
            [
                (np.broadcast_to(c, (m, k)), np.broadcast_to(c, (n, k)))
                for (m, n), k, c in zip(self.shapes, self.widths, cols)
            ]
        ).astype(bool)

    def balanced(self, Ws, ranks) -> np.ndarray:
        """Balanced factors ``U = P √S``, ``V = Q √S`` of the rank-``r_j`` truncated SVDs, zero-padded."""
        factors = []
        for w, r, k in zip(Ws, ranks, self.widths):
            p, s, qt = np.linalg.svd(w, full_matrices=False)
            root = np.sqrt(s[:r])
            u, v = np.zeros((w.shape[0], k)), np.zeros((w.shape[1], k))
            u[:, :r], v[:, :r] = p[:, :r] * root, qt[:r].T * root
            factors.append((u, v))
        return self.flat(factors)


def layout_loss(model, layout: Layout, y):
    return model.loss_of_weights(layout.products(y))

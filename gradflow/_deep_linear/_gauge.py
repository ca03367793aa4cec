"""The Hessian of ``L(W_L ⋯ W_1)`` in the layers on the rank-``k`` stratum and off the gauge (docs/deep-linear.md,
*The greedy limit*): the check that a stage ``W^k`` of the greedy limit is a strict local minimum of ``L`` on the
matrices of rank ``k`` (Li, Luo & Lyu 2021; for ``L = 2`` the factorised family's, gradflow/_factorized/_gauge.py).

At layers ``W_l`` that hold ``W^k`` in their first ``k`` hidden coordinates (zero elsewhere, as
``balanced_layers`` makes them), write ``A_1 ∈ R^{k×n}``, ``A_l ∈ R^{k×k}``, ``A_L ∈ R^{m×k}`` for those blocks.

- *The rank-k stratum.* Layers supported on the blocks ``A`` have a product of rank at most ``k``, and
  ``φ(A) = A_L ⋯ A_1`` is a submersion onto the rank-``k`` matrices ``M_k`` wherever ``W^k`` has rank ``k``. The
  other directions of the layers' space (entries in the sleeping hidden coordinates) carry no curvature at a
  stationary point when ``L ≥ 3``: they move ``W`` only at second order through two adjacent layers,
  ``W_{>l+1} δW_{l+1} δW_l W_{<l}``, and ``⟨G, ·⟩`` of that vanishes because ``Uᵀ G = 0`` and ``G V = 0`` there
  (``U``, ``V`` span ``W^k``'s columns and rows) while ``W_{>l+1}`` or ``W_{<l}`` is not the identity. So the full
  Hessian is 0 on them and the check is on the blocks.
- *The gauge.* ``A_l ↦ M_l A_l M_{l−1}^{−1}`` (``M_l ∈ GL(k)``, ``M_0 = I_n``, ``M_L = I_m``) keeps ``φ``: its
  tangent ``{(X_l A_l − A_l X_{l−1})_l : X_1, …, X_{L−1} ∈ R^{k×k}, X_0 = X_L = 0}`` has dimension ``(L−1)k²``
  and is the kernel of ``Dφ`` (the blocks have ``kn + (L−2)k² + mk = dim M_k + (L−1)k²`` entries), and the Hessian
  vanishes on it at a stationary point.

Off the gauge, ``Dφ`` maps the blocks one to one onto the tangent space of ``M_k`` and, at a stationary point, the
Hessian is the pull-back of ``L``'s Hessian on ``M_k``: its smallest eigenvalue there is positive exactly when
``W^k`` is a strict (non-degenerate) local minimum on the rank-``k`` matrices.

For ``L(W) = ½‖W − M‖²`` at the balanced layers of the truncation ``Σ_{i≤k} s_i u_i v_iᵀ`` of ``M`` the eigenvalues
are, with ``s_j`` for ``j > k`` the others of ``M``'s ``min(m, n)`` singular values: ``(s_a² − s_b²) /
(s_a^{2/L} − s_b^{2/L})`` for ``a ≠ b ≤ k`` and ``L s_a^{2(L−1)/L}`` (the blocks' own ``k × k`` part),
``s_i^{(L−2)/L} (s_i ± s_j)`` for ``i ≤ k < j`` (a sleeping row with a sleeping column, coupled by ``G``) and
``s_i^{2(L−1)/L}`` (``|m − n|`` times each ``i``). The smallest is ``s_k^{(L−2)/L} (s_k − s_{k+1})``
(``s_{k+1} = 0`` past ``min(m, n)``; ``L s_k^{2(L−1)/L}`` when ``k = m = n``), ``σ_k − σ_{k+1}`` at ``L = 2``;
at a stationary point holding other triples (say ``s_2`` alone) it is ``s_i^{(L−2)/L}(s_i − s_j) < 0`` for a held
``s_i`` below a sleeping ``s_j``. tests/deep_linear/test_greedy.py derives this spectrum from a dense Hessian.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg


def active_mask(shapes, k: int) -> np.ndarray:
    """The entries of the packed layers ``(W_1, …, W_L)`` of the given ``shapes`` in their first ``k`` hidden
    coordinates: the rows ``:k`` of ``W_1``, the block ``[:k, :k]`` of ``W_2 … W_{L−1}``, the columns ``:k`` of
    ``W_L``."""
    masks = []
    for l, shape in enumerate(shapes):
        mask = np.zeros(shape, bool)
        rows = slice(None) if l == len(shapes) - 1 else slice(0, k)
        cols = slice(None) if l == 0 else slice(0, k)
        mask[rows, cols] = True
        masks.append(mask.ravel())
    return np.concatenate(masks)


def gauge_directions(layers, k: int) -> np.ndarray:
    """The gauge's tangent at ``layers`` (held in their first ``k`` hidden coordinates) on the entries of
    :func:`active_mask`: the columns ``(X_l W_l − W_l X_{l−1})_l`` for ``X_h = E_ab`` (one hidden layer ``h``, one
    entry ``a, b < k``, the other ``X`` zero), ``(L−1)k²`` of them."""
    shapes = [w.shape for w in layers]
    mask = active_mask(shapes, k)
    sizes = [a * b for a, b in shapes]
    offsets = np.cumsum([0, *sizes[:-1]])
    columns = []
    for h in range(len(layers) - 1):  # the hidden layer between W_{h+1} and W_{h+2}
        for a in range(k):
            for b in range(k):
                below, above = np.zeros(shapes[h]), np.zeros(shapes[h + 1])
                below[a] = layers[h][b]  # E_ab W_{h+1}
                above[:, b] = -layers[h + 1][:, a]  # −W_{h+2} E_ab
                flat = np.zeros(sum(sizes))
                flat[offsets[h] : offsets[h] + sizes[h]] = below.ravel()
                flat[offsets[h + 1] : offsets[h + 1] + sizes[h + 1]] = above.ravel()
                columns.append(flat[mask])
    return np.stack(columns, axis=1)


def min_eig_off_gauge(hessian: np.ndarray, layers, k: int) -> float:
    """The smallest eigenvalue of ``hessian`` (of ``L`` in the packed ``layers``, which hold a rank-``k`` point in
    their first ``k`` hidden coordinates) on the entries of :func:`active_mask`, off :func:`gauge_directions`: dense,
    in an orthonormal basis of the gauge's orthogonal complement there (``k(m + n − k)`` vectors; the family's
    phase (B) already forms this matrix's size for its Jacobian)."""
    mask = active_mask([w.shape for w in layers], k)
    basis = scipy.linalg.null_space(gauge_directions(layers, k).T)
    block = hessian[np.ix_(mask, mask)]
    return float(np.linalg.eigvalsh(basis.T @ (0.5 * (block + block.T)) @ basis)[0])

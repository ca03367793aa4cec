"""The log singular values of ``W = U Vᵀ`` from the continuous-QR state, at any scale (docs/math.md, *Full weights:
the exact flow*), in NumPy on the recorded states."""

from __future__ import annotations

import numpy as np

from ._qr import Factor

_CLUSTER_GAP = 18.4  # log σ gap beyond which singular values are computed apart (e^{−18.4} = 1e-8)


def log_singular_values(f: Factor, m: int) -> np.ndarray:
    """``log σ`` of every recorded ``W``, shape ``f.rho.shape`` (descending)."""
    Q, rho, R = (np.asarray(x) for x in (f.Q, f.rho, f.R))
    lead = rho.shape[:-1]
    out = np.empty(rho.shape)
    for idx in np.ndindex(lead):
        out[idx] = _log_sv_one(Q[idx], rho[idx], R[idx], m)
    return out


def _log_sv_one(Q, rho, R, m) -> np.ndarray:
    """``log σ`` of one state; NaN where the state is not finite (``Q``, ``ρ`` or ``R̃``: an output not reached is
    ``+inf``) or its ``R̃ R̃ᵀ`` overflows, where NumPy's factorisations would raise."""
    if not all(np.all(np.isfinite(x)) for x in (Q, rho, R)):
        return np.full(rho.shape, np.nan)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            return _log_sv_finite(Q, rho, R, m)
    except np.linalg.LinAlgError:
        return np.full(rho.shape, np.nan)


def _log_sv_finite(Q, rho, R, m) -> np.ndarray:
    """``W = F D² Hᵀ`` with ``D = diag(e^ρ)`` and bounded ``F, H`` (docs/math.md): block elimination over clusters
    of log scales more than ``_CLUSTER_GAP`` apart, an SVD within each cluster, in scaled arithmetic."""
    order = np.argsort(-rho)
    Q, rho, R = Q[:, order], rho[order], R[np.ix_(order, order)]
    K = R @ R.T
    L = np.linalg.cholesky(K)
    Lhat = np.where(np.tri(len(rho), dtype=bool), L * np.exp(np.clip(rho[:, None] - rho[None, :], -745, 0.0)), 0.0)
    F, H = Q[:m] @ Lhat, Q[m:] @ Lhat
    Rf, Rh = np.linalg.qr(F)[1], np.linalg.qr(H)[1]
    up = np.triu(np.ones((len(rho),) * 2, dtype=bool))
    scale = np.exp(np.clip(rho[None, :] - rho[:, None], -745, 0.0))  # e^{ρ_j − ρ_i}, i ≤ j
    N = np.where(up, Rf * scale, 0.0) @ np.where(up, Rh * scale, 0.0).T  # D⁻¹ R_f D (D⁻¹ R_h D)ᵀ
    # clusters: consecutive log scales of σ ≈ e^{2ρ} closer than the gap
    breaks = np.flatnonzero(2.0 * (rho[:-1] - rho[1:]) > _CLUSTER_GAP) + 1
    bounds = [0, *breaks.tolist(), len(rho)]
    logs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a:
            S = N[a:b, a:b] - N[a:b, :a] @ np.linalg.solve(N[:a, :a], N[:a, a:b])
        else:
            S = N[a:b, a:b]
        d = np.exp(rho[a:b] - rho[a])
        sv = np.linalg.svd(d[:, None] * S * d[None, :], compute_uv=False)
        with np.errstate(divide="ignore"):
            logs.append(np.log(sv) + 2.0 * rho[a])
    return np.sort(np.concatenate(logs))[::-1]

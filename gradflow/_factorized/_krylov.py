"""Linear algebra on Hessian-vector products, for phase (B) of the greedy low-rank limit (docs/math.md, *Full weights:
the greedy low-rank limit*, *How (B) is computed*): Steihaug's truncated conjugate gradients, and the φ-functions of a
symmetric matrix applied to a vector by the Lanczos method."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_NULL_CURVATURE = 1e-10  # a direction's curvature below this times the largest seen is 0: it lies in the gauge


def steihaug_cg(matvec, g, radius, rtol, max_iterations):
    """The step ``s`` that minimises the model ``gᵀs + ½ sᵀH s`` in the ball ``‖s‖ ≤ radius`` approximately:
    conjugate gradients on ``H s = −g`` from ``s = 0`` until ``‖H s + g‖ ≤ rtol ‖g‖``, stopped on the boundary
    where an iterate would leave the ball or a direction has negative curvature (Steihaug 1983; Nocedal & Wright,
    Algorithm 7.2). The iterates lie in the Krylov space of ``g``: for a consistent singular system inside the
    ball ``s`` tends to ``−H⁺ g``. A direction of curvature 0 (below ``_NULL_CURVATURE`` times the largest seen,
    as the pseudo-inverse drops tiny eigenvalues) ends the iteration where it is: it lies in the null space, where
    only the rounding of g points, and the model does not change along it. Returns ``(s, gᵀs + ½ sᵀH s,
    iterations)``: the model's value follows from the residual ``r = H s + g``, kept along, as ``½ (g + r)ᵀ s``."""
    g_norm = jnp.linalg.norm(g)

    def body(state):
        n, s, r, d, largest, _ = state
        hd = matvec(d)
        dd, sd, ss = jnp.vdot(d, d), jnp.vdot(s, d), jnp.vdot(s, s)
        curvature = jnp.vdot(d, hd)
        largest = jnp.maximum(largest, curvature / dd)
        null = jnp.abs(curvature) <= _NULL_CURVATURE * largest * dd
        rr = jnp.vdot(r, r)
        step = rr / jnp.where(curvature > 0, curvature, 1.0)
        outside = ~null & ((curvature < 0) | (jnp.linalg.norm(s + step * d) >= radius))
        to_boundary = (-sd + jnp.sqrt(sd**2 + dd * (radius**2 - ss))) / dd  # ‖s + τd‖ = radius
        step = jnp.where(null, 0.0, jnp.where(outside, to_boundary, step))
        r_next = r + step * hd
        d_next = -r_next + (jnp.vdot(r_next, r_next) / rr) * d
        done = null | outside | (jnp.linalg.norm(r_next) <= rtol * g_norm)
        return n + 1, s + step * d, r_next, d_next, largest, done

    def cond(state):
        n, done = state[0], state[-1]
        return (n < max_iterations) & ~done

    init = (0, jnp.zeros_like(g), g, -g, jnp.zeros((), g.dtype), g_norm == 0)
    n, s, r, _, _, _ = jax.lax.while_loop(cond, body, init)
    return s, 0.5 * jnp.vdot(g + r, s), n


def phi_functions(z):
    """``φ_1(z), …, φ_4(z)`` elementwise (stacked), ``φ_0 = exp`` and ``φ_{j+1}(z) = (φ_j(z) − 1/j!) / z``: by that
    recurrence where ``|z| > 1``, by the Taylor series ``φ_j(z) = Σ_i z^i / (i + j)!`` (18 terms, Horner's rule)
    where ``|z| ≤ 1``."""
    small = jnp.abs(z) <= 1
    zs, zl = jnp.where(small, z, 0.0), jnp.where(small, 1.0, z)
    phi, out = jnp.exp(zl), []
    for j in range(1, 5):
        phi = (phi - 1.0 / math.factorial(j - 1)) / zl
        series = jnp.zeros_like(z)
        for i in reversed(range(18)):
            series = series * zs + 1.0 / math.factorial(i + j)
        out.append(jnp.where(small, series, phi))
    return jnp.stack(out)


_KRYLOV_SIZE = 64  # the largest Lanczos basis
_KRYLOV_CHECKS = (8, 16, 32, 64)  # the sizes at which its φ are tried, in turn


def krylov_phi(matvec, v, h, k, tol):
    """``φ_k(−h H) v`` (k = 1, 2 or 3, traced) for a symmetric ``H`` (``matvec``) by the Lanczos method:
    ``‖v‖ V_m φ_k(−h T_m) e_1`` with ``H V_m ≈ V_m T_m`` (fully reorthogonalised), tried at m = 8, 16, 32, 64 until
    the error estimate ``‖v‖ h β_m |e_mᵀ φ_{k+1}(−h T_m) e_1|`` (Hochbruck & Lubich 1997; Niesen & Wright 2012) is
    ``≤ tol`` or the space is invariant. Returns ``(w = φ_k(−h H) v, H w, Lanczos steps, converged)``, with ``H w``
    from the Lanczos relation ``H V_m c = V_m T_m c + β_m v_{m+1} c_m``."""
    size = _KRYLOV_SIZE
    norm = jnp.linalg.norm(v)
    basis = jnp.zeros((size + 1, v.size), v.dtype).at[0].set(v / jnp.where(norm > 0, norm, 1.0))
    tiny = jnp.finfo(v.dtype).eps

    def lanczos(state):
        j, basis, alpha, beta, _ = state
        w = matvec(basis[j])
        a = jnp.vdot(basis[j], w)
        w = w - a * basis[j] - jnp.where(j > 0, beta[j - 1], 0.0) * basis[jnp.maximum(j - 1, 0)]
        w = w - basis.T @ (basis @ w)  # full reorthogonalisation (rows beyond j are 0)
        b = jnp.linalg.norm(w)
        invariant = b <= 1e3 * tiny * (jnp.abs(a) + jnp.where(j > 0, beta[j - 1], 0.0))
        basis = basis.at[j + 1].set(jnp.where(invariant, 0.0, w / jnp.where(b > 0, b, 1.0)))
        return j + 1, basis, alpha.at[j].set(a), beta.at[j].set(jnp.where(invariant, 0.0, b)), invariant

    def eigh_of_t(m):
        """The eigenpairs of T_j from its leading ``m × m`` block (``j ≤ m``; small eigenproblems are far cheaper
        than one of the largest size), padded to the largest size with zeros and unit vectors."""

        def apply(j, alpha, beta):
            inside = jnp.arange(m) < j  # T_j, padded with zeros (decoupled from e_1)
            t = jnp.diag(jnp.where(inside, alpha[:m], 0.0)) + jnp.diag(jnp.where(inside[1:], beta[: m - 1], 0.0), 1)
            lam, q = jnp.linalg.eigh(t + jnp.triu(t, 1).T)
            return jnp.zeros(size, v.dtype).at[:m].set(lam), jnp.eye(size, dtype=v.dtype).at[:m, :m].set(q)

        return apply

    def segment(state):
        n, j, basis, alpha, beta, invariant, _, _ = state
        stop = jnp.asarray(_KRYLOV_CHECKS)[n]
        j, basis, alpha, beta, invariant = jax.lax.while_loop(
            lambda s: (s[0] < stop) & ~s[4], lanczos, (j, basis, alpha, beta, invariant)
        )
        lam, q = jax.lax.switch(n, [eigh_of_t(m) for m in _KRYLOV_CHECKS], j, alpha, beta)
        phis = phi_functions(-h * lam)
        estimate = norm * h * beta[j - 1] * jnp.abs(q[j - 1] @ (phis[k] * q[0]))
        return n + 1, j, basis, alpha, beta, invariant, q @ (phis[k - 1] * q[0]), invariant | (estimate <= tol)

    def more(state):
        n, done = state[0], state[-1]
        return (n < len(_KRYLOV_CHECKS)) & ~done

    zero = jnp.zeros(size, v.dtype)
    init = (0, 0, basis, zero, zero, norm == 0, zero, norm == 0)
    _, j, basis, alpha, beta, _, f, done = jax.lax.while_loop(more, segment, init)
    inside = jnp.arange(size) < j
    previous, following = jnp.roll(f, 1).at[0].set(0.0), jnp.roll(f, -1).at[-1].set(0.0)
    tf = jnp.where(inside, alpha * f + jnp.roll(beta, 1).at[0].set(0.0) * previous + beta * following, 0.0)
    hw = tf @ basis[:size] + beta[j - 1] * f[j - 1] * basis[j]
    return norm * (f @ basis[:size]), norm * hw, j, done

"""GMRES for the Newton equations of an implicit stage, matrix-free: the matrix is seen only through its products with
vectors (Jacobian-vector products), so that a stage of ``N`` unknowns costs ``O(N)`` memory, not the ``N²`` of a dense
Jacobian, and ``O(k N)`` work beyond ``k`` products for ``k`` iterations, not ``N³``."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp


class Krylov(eqx.Module):
    """What :func:`gmres` reached: the solution ``x``, the 2-norm of its residual ``‖b − A x‖`` as the iteration
    estimates it, the number of products with ``A`` it took, and whether the residual met the tolerance."""

    x: jax.Array
    residual: jax.Array
    products: jax.Array
    converged: jax.Array


def gmres(matvec: Callable, b: jax.Array, *, tol, dimension: int, restarts: int) -> Krylov:
    """The solution of ``A x = b`` by GMRES (Saad & Schultz 1986) from ``x = 0``: the ``x`` of least ``‖b − A x‖₂`` over
    the Krylov space ``span{b, A b, …, A^{k−1} b}``, stopped at the first ``k`` whose residual is at most ``tol``.

    The basis is orthonormalised by classical Gram–Schmidt applied twice (as accurate as the modified one, and one
    matrix product per pass), the Hessenberg matrix reduced by Givens rotations, which give the residual's norm at
    every ``k`` without forming ``x``. A space of ``dimension`` vectors that has not met ``tol`` is restarted from the
    ``x`` it gives, at most ``restarts`` times. ``matvec`` maps a vector of ``b``'s shape to ``A`` times it."""
    size = b.size
    dimension = min(dimension, size)
    dtype = b.dtype

    def cycle(x):
        r = b - matvec(x)
        beta = jnp.linalg.norm(r)
        basis = jnp.zeros((dimension + 1, size), dtype).at[0].set(r / jnp.where(beta > 0, beta, 1.0))
        R = jnp.zeros((dimension + 1, dimension), dtype)  # the Hessenberg matrix, rotated to upper triangular
        g = jnp.zeros(dimension + 1, dtype).at[0].set(beta)  # the rotated right-hand side: |g[k]| is the residual
        rotations = jnp.zeros((dimension, 2), dtype)

        def going(carry):
            k, _, _, g, _ = carry
            return (k < dimension) & (jnp.abs(g[k]) > tol)

        def arnoldi(carry):
            k, basis, R, g, rotations = carry
            w = matvec(basis[k])
            live = jnp.arange(dimension + 1) <= k
            h = jnp.where(live, basis @ w, 0.0)
            w = w - h @ basis
            again = jnp.where(live, basis @ w, 0.0)  # the second pass
            h, w = h + again, w - again @ basis
            norm = jnp.linalg.norm(w)
            basis = basis.at[k + 1].set(w / jnp.where(norm > 0, norm, 1.0))
            h = h.at[k + 1].set(norm)

            def rotate(i, h):
                c, s = rotations[i]
                apply = i < k
                top, bottom = c * h[i] + s * h[i + 1], -s * h[i] + c * h[i + 1]
                return h.at[i].set(jnp.where(apply, top, h[i])).at[i + 1].set(jnp.where(apply, bottom, h[i + 1]))

            h = jax.lax.fori_loop(0, dimension, rotate, h)
            radius = jnp.hypot(h[k], h[k + 1])
            c, s = jnp.where(radius > 0, h[k] / radius, 1.0), jnp.where(radius > 0, h[k + 1] / radius, 0.0)
            h = h.at[k].set(radius).at[k + 1].set(0.0)
            g = g.at[k + 1].set(-s * g[k]).at[k].set(c * g[k])
            return k + 1, basis, R.at[:, k].set(h), g, rotations.at[k].set(jnp.array([c, s]))

        k, basis, R, g, _ = jax.lax.while_loop(going, arnoldi, (0, basis, R, g, rotations))
        used = jnp.arange(dimension) < k
        square = jnp.where(used[:, None] & used[None, :], R[:dimension], jnp.eye(dimension, dtype=dtype))
        y = jax.scipy.linalg.solve_triangular(square, jnp.where(used, g[:dimension], 0.0), lower=False)
        return x + y @ basis[:dimension], jnp.abs(g[k]), k + 1

    def unmet(carry):
        _, residual, _, cycles = carry
        return (residual > tol) & (cycles <= restarts)

    def restart(carry):
        x, _, products, cycles = carry
        x, residual, used = cycle(x)
        return x, residual, products + used, cycles + 1

    start = (jnp.zeros_like(b), jnp.asarray(jnp.inf, dtype), jnp.asarray(0), jnp.asarray(0))
    x, residual, products, _ = jax.lax.while_loop(unmet, restart, start)
    return Krylov(x=x, residual=residual, products=products, converged=residual <= tol)

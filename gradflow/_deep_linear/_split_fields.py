"""The split's equations (docs/deep-linear.md, *Between the two ranges*): the fields of ``A`` and ``S`` for the
layers ``W_l = A_l + α S_l``, and ``G`` in the frames, from :class:`AffineGradient` (the square loss of outputs linear
in ``W``) or :class:`LinearOutputs` (any other loss of such outputs: their Jacobian, or :class:`TimesInputs` for outputs
``W x_j``), or :class:`RightGradient` (``G0 − W C``, with no ``(mn)²`` coefficients: the matrix-free split's, for
regression and factorisation); :class:`SleepingPart` keeps ``G(W_A)`` to its sleeping block for a held plateau
(gradflow/_deep_linear/_held.py)."""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._data import sample_loss
from ._model import DeepLinearModel, _unpack


def fields(y, gradient, log_alpha, shapes):
    """``(dA/dt, dS/dt)`` packed (the module's equations) for the state ``y`` (``A`` and ``S`` packed), with ``G`` and
    ``ΔG`` from ``gradient`` (an :class:`AffineGradient` or :class:`LinearOutputs` in the frames)."""
    L = len(shapes)
    alpha = jnp.exp(log_alpha)
    parts = _unpack(y, shapes * 2)
    A, S = parts[:L], parts[L:]
    W = [a + alpha * s for a, s in zip(A, S)]
    n, m = shapes[0][1], shapes[-1][0]
    below_A, below_W, below_D = [None] * L, [None] * L, [None] * L
    P_A, P_W, D = jnp.eye(n), jnp.eye(n), jnp.zeros((n, n))
    for l in range(L):
        below_A[l], below_W[l], below_D[l] = P_A, P_W, D
        D = S[l] @ P_W + A[l] @ D  # (W_l W_{<l} − A_l A_{<l}) / α
        P_A, P_W = A[l] @ P_A, W[l] @ P_W
    G_A = gradient.at(P_A)
    dG = gradient.change(P_A, D, alpha)  # (G(W) − G(W_A)) / α, without cancellation
    above_A, above_W, above_D = [None] * L, [None] * L, [None] * L
    P_A, P_W, D = jnp.eye(m), jnp.eye(m), jnp.zeros((m, m))
    for l in reversed(range(L)):
        above_A[l], above_W[l], above_D[l] = P_A, P_W, D
        D = P_W @ S[l] + D @ A[l]  # (W_{>l} W_l − A_{>l} A_l) / α
        P_A, P_W = P_A @ A[l], P_W @ W[l]
    f_A = [above_A[l].T @ G_A @ below_A[l].T for l in range(L)]
    f_S = [
        above_D[l].T @ G_A @ below_A[l].T
        + above_A[l].T @ G_A @ below_D[l].T
        + alpha * above_D[l].T @ G_A @ below_D[l].T
        + above_W[l].T @ dG @ below_W[l].T
        for l in range(L)
    ]
    return jnp.concatenate([x.ravel() for x in f_A + f_S])


velocity = eqx.filter_jit(fields)
jacobian = eqx.filter_jit(jax.jacfwd(fields))


class AffineGradient(eqx.Module):
    """``G(W) = G0 + K[W]`` (``K[W]_{ab} = Σ K_{abcd} W_{cd}``): the square loss of outputs linear in ``W``, where
    ``ΔG = K[D]`` is exact."""

    G0: jax.Array
    K: jax.Array

    def at(self, W):
        return self.G0 + jnp.einsum("abcd,cd->ab", self.K, W)

    def change(self, W_A, D, alpha):
        """``(G(W_A + αD) − G(W_A)) / α = K[D]``."""
        return jnp.einsum("abcd,cd->ab", self.K, D)

    def in_frames(self, frames):
        """``Q_Lᵀ G(Q_L W̃ Q_0ᵀ) Q_0 = G̃0 + K̃[W̃]``, with ``G0`` and ``K`` rotated once (module docstring)."""
        Q_in, Q_out = frames[0], frames[-1]
        K = np.einsum("ai,bj,abcd,ck,dl->ijkl", Q_out, Q_in, self.K, Q_out, Q_in, optimize=True)
        return AffineGradient(jnp.asarray(Q_out.T @ np.asarray(self.G0) @ Q_in), jnp.asarray(K))


GAUSS_NODES = 8
"""Gauss–Legendre nodes of :meth:`LinearOutputs.change`: exact where ``ℓ``'s Hessian is a polynomial of degree ≤ 15
along the segment; for the cross-entropy within 4e-15 of a 40-digit difference while the outputs move by at most
1.25 (docs/deep-linear.md, *Between the two ranges*)."""

DIRECT_CHANGE = 0.5
"""Where the outputs move by more than this between ``W_A`` and ``W`` (``max |α δ|``), :meth:`LinearOutputs.change`
takes the difference itself, whose rounding (``eps / max |α δ|`` relative) is then below 1e-15."""


class DenseJacobian(eqx.Module):
    """``z = M[W]`` for any outputs affine in ``W``, from their Jacobian ``M`` (the outputs' axes, then ``W``'s two):
    ``mn`` numbers per output."""

    M: jax.Array

    def push(self, W):
        """``M[W]``, in the outputs' shape."""
        return jnp.tensordot(self.M, W, axes=2)

    def pull(self, dz):
        """``Mᵀ[dz]``, an ``(m, n)`` matrix."""
        return jnp.tensordot(dz, self.M, axes=dz.ndim)

    def in_frames(self, Q_in, Q_out):
        """The same map of ``W̃``, ``W = Q_out W̃ Q_inᵀ``: ``M`` rotated once."""
        return DenseJacobian(
            jnp.asarray(np.einsum("...cd,ca,db->...ab", np.asarray(self.M), Q_out, Q_in, optimize=True))
        )


class TimesInputs(eqx.Module):
    """``z_j = Q W x_j``: the outputs of the map ``W`` on the inputs ``x_j`` (linear regression's, with any loss), with
    ``Q = I`` until the frames turn. ``N n + m²`` numbers where :class:`DenseJacobian` holds ``N m · mn`` (3.3 GiB for
    the cross-entropy of 200 samples of 130 logits at 130 × 130), and ``N m (n + m)`` work per product instead of
    ``N m · mn``."""

    X: jax.Array  # (N, n): the inputs, one per row
    Q: jax.Array  # (m, m)

    def push(self, W):
        return self.X @ W.T @ self.Q.T

    def pull(self, dz):
        return self.Q.T @ dz.T @ self.X

    def in_frames(self, Q_in, Q_out):
        """``z_j = (Q Q_out) W̃ (Q_inᵀ x_j)`` for ``W = Q_out W̃ Q_inᵀ``."""
        return TimesInputs(jnp.asarray(np.asarray(self.X) @ Q_in), jnp.asarray(np.asarray(self.Q) @ Q_out))


class LinearOutputs(eqx.Module):
    """``G(W) = −Mᵀ ∇ℓ̄(z0 + M[W])`` for outputs ``z = h(X; W) = z0 + M[W]`` affine in ``W`` (``M`` a
    :class:`DenseJacobian` or :class:`TimesInputs`) and any loss ``ℓ̄(z) = (1/n) Σ_j ℓ(y_j, z_j)``."""

    z0: jax.Array
    M: DenseJacobian | TimesInputs
    Y: jax.Array
    loss: object = eqx.field(static=True)

    def _loss_gradient(self, z):
        ell = sample_loss(self.loss)
        return jax.grad(lambda z: jnp.mean(jax.vmap(ell)(self.Y, z)))(z)

    def at(self, W):
        return -self.M.pull(self._loss_gradient(self.z0 + self.M.push(W)))

    def change(self, W_A, D, alpha):
        """``(G(W_A + αD) − G(W_A)) / α = −Mᵀ ∫₀¹ ∇²ℓ̄(z_A + s α δ)[δ] ds`` with ``δ = M[D]``, by Gauss–Legendre
        quadrature on :data:`GAUSS_NODES` nodes: each node's term is a Hessian–vector product, so nothing cancels (the
        difference itself where the outputs move by more than :data:`DIRECT_CHANGE`)."""
        z_A, delta = self.z0 + self.M.push(W_A), self.M.push(D)
        nodes, weights = np.polynomial.legendre.leggauss(GAUSS_NODES)
        quadrature = sum(
            0.5 * w * jax.jvp(self._loss_gradient, (z_A + 0.5 * (x + 1.0) * alpha * delta,), (delta,))[1]
            for x, w in zip(nodes, weights)
        )
        difference = (self._loss_gradient(z_A + alpha * delta) - self._loss_gradient(z_A)) / alpha
        far = alpha * jnp.max(jnp.abs(delta)) > DIRECT_CHANGE
        return -self.M.pull(jnp.where(far, difference, quadrature))

    def in_frames(self, frames):
        """The same outputs of ``W̃`` in the frames, ``W = Q_L W̃ Q_0ᵀ``: the map rotated once."""
        M = self.M.in_frames(np.asarray(frames[0]), np.asarray(frames[-1]))
        return LinearOutputs(self.z0, M, self.Y, self.loss)


class RightGradient(eqx.Module):
    """``G(W) = G0 − W C`` (``C`` symmetric ``n × n``): the square loss of outputs ``W x`` (deep linear regression,
    ``C`` the inputs' second moment) or ``W`` itself (matrix factorisation, ``C = I``), whose ``K[W] = −W C`` needs
    ``n²`` numbers, not :class:`AffineGradient`'s ``(mn)²`` (800 MB at 100 × 100), and ``m n²`` work, not ``(mn)²``.
    In the frames ``G̃0 = Q_Lᵀ G0 Q_0`` and ``C̃ = Q_0ᵀ C Q_0`` (rotated once per frame, as ``K`` is); ``ΔG = −D C``
    exactly."""

    G0: jax.Array
    C: jax.Array

    def at(self, W):
        return self.G0 - W @ self.C

    def change(self, W_A, D, alpha):
        """``(G(W_A + αD) − G(W_A)) / α = −D C``."""
        return -D @ self.C

    def in_frames(self, frames):
        Q_in, Q_out = np.asarray(frames[0]), np.asarray(frames[-1])
        G0 = Q_out.T @ np.asarray(self.G0) @ Q_in
        return RightGradient(jnp.asarray(G0), jnp.asarray(Q_in.T @ np.asarray(self.C) @ Q_in))


class SleepingPart(eqx.Module):
    """``gradient`` with ``G(W_A)`` kept to its sleeping block (rows and columns from ``k`` on): on a held plateau
    ``A`` is at rest, and what is left of ``G(W_A)`` on its learned blocks is the rounding of ``A``'s residual velocity,
    which the blocks of ``S`` that meet a learned subspace would otherwise integrate over the plateau (docs/deep-linear.md,
    *Held plateaus*). ``ΔG`` is ``gradient``'s."""

    gradient: AffineGradient | LinearOutputs
    k: int = eqx.field(static=True)

    def at(self, W):
        G = self.gradient.at(W)
        return jnp.zeros_like(G).at[self.k :, self.k :].set(G[self.k :, self.k :])

    def change(self, W_A, D, alpha):
        return self.gradient.change(W_A, D, alpha)


def _outputs_of(model: DeepLinearModel, W):
    return jax.vmap(model.h, in_axes=(0, None))(jnp.asarray(model.X), W)


def outputs_are_linear(model: DeepLinearModel) -> bool:
    """Whether the outputs ``h(X; W)`` are affine in ``W`` (what the split needs, with any loss): their second
    derivative vanishes, exactly, along random directions at two random points."""
    rng = np.random.default_rng(0)
    for _ in range(2):
        W, D = (jnp.asarray(rng.standard_normal(model.shape)) for _ in range(2))
        second = _second_derivative(model, W, D)
        if np.any(np.asarray(second) != 0.0):
            return False
    return True


@eqx.filter_jit
def _second_derivative(model: DeepLinearModel, W, D):
    """``d²/ds² h(X; W + sD)`` at ``s = 0``, compiled once per model (not per call of :func:`outputs_are_linear`)."""
    return jax.jvp(lambda w: jax.jvp(lambda v: _outputs_of(model, v), (w,), (D,))[1], (W,), (D,))[1]


@eqx.filter_jit
def _affine(model: DeepLinearModel) -> AffineGradient:
    """``G(0)`` and ``K = ∂G/∂W`` (constant for an affine ``G``), so that ``G(W) = G(0) + K[W]``."""
    zero = jnp.zeros(model.shape)
    return AffineGradient(model.G(zero), jax.jacfwd(model.G)(zero))


@eqx.filter_jit
def _jacobian(model: DeepLinearModel) -> DenseJacobian:
    return DenseJacobian(jax.jacfwd(lambda W: _outputs_of(model, W))(jnp.zeros(model.shape)))


def times_inputs(model: DeepLinearModel) -> np.ndarray | None:
    """The inputs ``x_j`` (one per row) if the outputs are ``z0 + W x_j`` (:class:`TimesInputs`), else None: read from
    the outputs' change along ``E_{1b}`` (one Jacobian-vector product per column of ``W``: ``x_jb`` on the first
    output, nothing on the others), then checked on two random ``W``."""
    m, n = model.shape
    outputs = jax.eval_shape(lambda: _outputs_of(model, jnp.zeros((m, n))))
    if outputs.shape[1:] != (m,):
        return None
    X, checks = _inputs_parts(model, jnp.asarray(np.random.default_rng(0).standard_normal((2, m, n))))
    X = np.asarray(X)
    ok = all(
        np.allclose(np.asarray(dz), X @ np.asarray(w).T, rtol=0.0, atol=1e-12 * max(np.abs(dz).max(), 1e-300))
        for w, dz in checks
    )
    return X if ok else None


@eqx.filter_jit
def _inputs_parts(model: DeepLinearModel, probes):
    m, n = model.shape
    zero = jnp.zeros((m, n))

    def change(W):
        return jax.jvp(lambda v: _outputs_of(model, v), (zero,), (W,))[1]

    X = jax.vmap(lambda b: change(zero.at[0, b].set(1.0))[:, 0])(jnp.arange(n)).T  # x_jb = the first output's change
    return X, [(w, change(w)) for w in probes]


def right_gradient(model: DeepLinearModel) -> RightGradient | None:
    """``G(W) = G0 − W C`` if the model's square loss has that form (:class:`RightGradient`), else None: ``C`` read
    from ``K[E_{1j}] = −e_1 C_jᵀ`` (one Jacobian-vector product per column), then checked on two random ``W``."""
    if model.loss != "square":
        return None
    m, n = model.shape
    G0, C, checks = _right_parts(model, jnp.asarray(np.random.default_rng(0).standard_normal((2, m, n))))
    C = np.asarray(C)
    ok = all(
        np.allclose(np.asarray(kw), -np.asarray(w) @ C, rtol=0.0, atol=1e-12 * max(np.abs(kw).max(), 1e-300))
        for w, kw in checks
    )
    return RightGradient(G0, jnp.asarray(0.5 * (C + C.T))) if ok and np.allclose(C, C.T, atol=1e-12) else None


@eqx.filter_jit
def _right_parts(model: DeepLinearModel, probes):
    m, n = model.shape
    zero = jnp.zeros((m, n))

    def K(W):
        return jax.jvp(model.G, (zero,), (W,))[1]

    C = -jax.vmap(lambda j: K(zero.at[0, j].set(1.0))[0])(jnp.arange(n))  # C[j] = −K[E_1j]'s first row
    return model.G(zero), C, [(w, K(w)) for w in probes]


class SplitForm(NamedTuple):
    """What :func:`split_gradient` holds for a model (:func:`split_form`): ``kind`` (``"right"``, ``"affine"``, ``"inputs"`` or
    ``"jacobian"``), its ``bytes``, and the parts already read (the :class:`RightGradient`, or the inputs of
    :class:`TimesInputs`)."""

    kind: str
    bytes: int
    right: RightGradient | None = None
    inputs: np.ndarray | None = None


def split_form(model: DeepLinearModel, *, free: bool) -> SplitForm:
    """The form of ``G`` :func:`split_gradient` takes (module docstring) and the bytes of its coefficients, read from the
    model once: ``simulate_flow`` checks the bytes before the split runs, then hands the form to it."""
    m, n = model.shape
    right = right_gradient(model) if free else None
    if right is not None:
        return SplitForm("right", 8 * (n * n + m * n), right=right)
    K, M = _sizes(model)
    if model.loss == "square" and K <= M:
        return SplitForm("affine", 8 * K)
    inputs = times_inputs(model)
    if inputs is not None:
        return SplitForm("inputs", 8 * (inputs.size + m * m), inputs=inputs)
    return SplitForm("jacobian", 8 * M)


def split_gradient(model: DeepLinearModel, *, free: bool = False, form: SplitForm | None = None):
    """``G`` in the form the split evaluates in its frames, from coefficients rotated once per frame (evaluated at the
    rotated-back ``W`` and rotated, its rounding stalled the steps: docs/deep-linear.md, *Between the two ranges*):
    :class:`RightGradient` where ``free`` and the model's ``G`` has its form (:func:`right_gradient`), else
    :class:`AffineGradient` for the square loss where ``K`` is no larger than the outputs' Jacobian ``M``, else
    :class:`LinearOutputs` (with :class:`TimesInputs` where the outputs are ``W x_j``, else ``M``), with NumPy arrays.
    The model's outputs must be linear in ``W`` (:func:`outputs_are_linear`); ``form``, :func:`split_form`'s for the
    same ``free``, if it was read already."""
    form = split_form(model, free=free) if form is None else form
    if form.kind == "right":
        coefficients = form.right
    elif form.kind == "affine":
        coefficients = _affine(model)
    else:
        z0 = _outputs_of(model, jnp.zeros(model.shape))
        if form.kind == "inputs":
            M = TimesInputs(jnp.asarray(form.inputs), jnp.eye(model.shape[0]))
        else:
            M = _jacobian(model)
        coefficients = LinearOutputs(z0, M, jnp.asarray(model.Y), model.loss)
    return jax.tree_util.tree_map(np.asarray, coefficients)


def _sizes(model: DeepLinearModel) -> tuple[int, int]:
    """The numbers in ``K`` (``(mn)²``) and in the outputs' Jacobian ``M`` (``mn`` per output)."""
    m, n = model.shape
    outputs = jax.eval_shape(lambda: _outputs_of(model, jnp.zeros((m, n))))
    return (m * n) ** 2, m * n * math.prod(outputs.shape)

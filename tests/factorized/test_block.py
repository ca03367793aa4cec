"""The implicit block of the split integrator (gradflow/_factorized/_block.py; docs/math.md, *The split
integrator*): its Jacobian in the moving entries' columns, its ESDIRK step on linear decay, its dense output (the
split step itself: tests/factorized/test_split.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._factorized import _block


@pytest.mark.parametrize("moving", ["all", "some", "none", "last"])
def test_the_block_jacobian_is_jacfwd_in_its_moving_columns(moving):
    """The block's Jacobian, its columns computed ``_JVP_BATCH`` Jacobian-vector products at a time: the moving
    entries' columns of the forward-mode Jacobian, the others 0 (37 entries: batches that end part-way)."""
    rng = np.random.default_rng(0)
    mask = {
        "all": np.ones(37, bool),
        "some": rng.random(37) < 0.5,
        "none": np.zeros(37, bool),
        "last": np.arange(37) == 36,
    }[moving]
    with jax.enable_x64(True):
        A = jnp.asarray(rng.normal(size=(37, 37)))
        x = jnp.asarray(rng.normal(size=37))
        field = lambda x: jnp.tanh(A @ x) * x  # noqa: E731
        J = jax.jit(_block.jacobian, static_argnums=0)(field, x, jnp.asarray(mask))
        expected = np.where(mask[None, :], np.asarray(jax.jacfwd(field)(x)), 0.0)
        np.testing.assert_allclose(np.asarray(J), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("lam", [0.1, 1.0, 1e6])
def test_the_esdirk_step_follows_linear_decay_and_damps_the_stiff(lam):
    """One step of Kværnø's ESDIRK method on ``x' = −λ x`` (its Jacobian exact, its Newton iterations converging): at
    ``λ h ≤ 0.5`` it lands on ``e^{−λ h}`` to order 5 (the local error falls more than 40 times when h halves; 2⁶ = 64
    asymptotically), and at ``λ h = 10⁶`` it damps the mode as its stability function does, ``R(z) ∝ 1/z → 0``
    (L-stable: 6.5e-6 at ``λ h = 10⁶``, twice that at half the step)."""
    from gradflow._factorized._explicit import LeapTolerances

    tol = LeapTolerances(rtol=0.0, atol=1e-8)
    with jax.enable_x64(True):
        x0 = jnp.ones(3)
        field = lambda x: -lam * x  # noqa: E731
        J = -lam * jnp.eye(3)
        moving = jnp.ones(3, bool)

        def step(h):
            x1, F1, _, ok, _ = jax.jit(_block.esdirk, static_argnums=0)(
                field, x0, field(x0), _block.iteration_matrix(J, h), h, tol, moving
            )
            assert bool(ok)
            np.testing.assert_allclose(np.asarray(F1), np.asarray(field(x1)))
            return float(x1[0])

        if lam >= 1e6:
            assert 0.0 < step(1.0) < 1e-5 and step(0.5) == pytest.approx(2.0 * step(1.0), rel=1e-3)
        else:
            errors = [abs(step(h) - np.exp(-lam * h)) for h in (0.5, 0.25)]
            assert errors[0] / errors[1] > 40.0


def test_the_dense_output_keeps_order_four_on_slow_modes_and_no_stiff_slope():
    """The block step's dense output on ``x' = Jx``, ``J = diag(−0.5, −1e4)``: on the slow mode it follows
    ``e^{−0.5 t}`` to order 4 (the largest error on the step falls about 16 times per halving of h); on the stiff
    mode, from a departure ``δ`` at the start to 0 at the end (as the L-stable step lands), it stays within ``2δ``,
    where the raw Hermite interpolant, whose slope there is ``−hλδ``, reaches ``0.15 hλ δ`` (1,480 δ at h = 1)."""
    with jax.enable_x64(True):
        J = jnp.diag(jnp.asarray([-0.5, -1e4]))
        cs = np.linspace(0.0, 1.0, 41)

        def dense(h, x0, x1):
            inverse = _block.iteration_matrix(J, h)
            out = _block.dense_output(x0, x1, J @ x0, J @ x1, h, J, inverse, h)
            return np.array([np.asarray(out(c)) for c in cs])

        errors = []
        for h in (0.4, 0.2):
            x0 = jnp.asarray([1.0, 0.0])
            x1 = jnp.exp(jnp.diag(J) * h) * x0
            errors.append(np.max(np.abs(dense(h, x0, x1)[:, 0] - np.exp(-0.5 * h * cs))))
        assert 12.0 < errors[0] / errors[1] < 20.0 and errors[1] < 1e-6
        delta = 1e-8
        stiff = dense(1.0, jnp.asarray([0.0, delta]), jnp.asarray([0.0, 0.0]))[:, 1]
        assert np.max(np.abs(stiff)) <= 2.0 * delta
        raw = [(c**3 - 2 * c**2 + c) * -1e4 * delta for c in cs]  # the raw slopes' term (the chord's is below δ)
        assert np.max(np.abs(raw)) > 1e3 * delta

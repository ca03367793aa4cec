"""The implicit block of the split integrator (gradflow/_factorized/_block.py; docs/math.md, *The split
integrator*): its Jacobian in the moving entries' columns. Its ESDIRK step is tested through the split step
(tests/factorized/test_split.py)."""

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
            x1, F1, _, ok, _ = jax.jit(_block.esdirk, static_argnums=0)(field, x0, field(x0), J, h, tol, moving)
            assert bool(ok)
            np.testing.assert_allclose(np.asarray(F1), np.asarray(field(x1)))
            return float(x1[0])

        if lam >= 1e6:
            assert 0.0 < step(1.0) < 1e-5 and step(0.5) == pytest.approx(2.0 * step(1.0), rel=1e-3)
        else:
            errors = [abs(step(h) - np.exp(-lam * h)) for h in (0.5, 0.25)]
            assert errors[0] / errors[1] > 40.0

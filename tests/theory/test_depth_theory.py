"""The depth-L oracles of `theory` (docs/depth.md) against independent DOP853 solves of the raw layer flows."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import theory


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_saxe_time_matches_the_mode_ode(depth):
    s, sigma0 = 1.3, 1e-3
    sol = solve_ivp(
        lambda t, x: depth * x ** (2 - 2 / depth) * (s - x),
        (0.0, 100.0),
        [sigma0],
        method="DOP853",
        rtol=1e-12,
        atol=1e-15,
        dense_output=True,
    )
    targets = np.array([0.1, 0.6, 1.2])
    times = theory.saxe_time(targets, s, sigma0, depth)
    np.testing.assert_allclose(sol.sol(times)[0], targets, rtol=1e-8)


def test_saxe_learning_time_tends_to_the_clock():
    """From σ₀ = (α a⁰)^L the half-way time is α^{−(L−2)} (a⁰)^{−(L−2)}/((L−2)s) (1 + o(1))."""
    s, a0 = 2.0, 0.7
    for depth in (3, 4):
        for alpha in (1e-3, 1e-6):
            t = theory.saxe_time(s / 2, s, (alpha * a0) ** depth, depth)
            clock = alpha ** -(depth - 2) * a0 ** -(depth - 2) / ((depth - 2) * s)
            assert t / clock == pytest.approx(1.0, abs=10 * alpha ** (depth - 2) * a0 ** -(depth - 2) + 1e-9)


@pytest.mark.parametrize("depth", [3, 4])
def test_woodworth_tied_beta_matches_the_layer_flow(depth):
    rng = np.random.default_rng(0)
    n, d, alpha = 3, 4, 0.3
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n)
    t = np.linspace(0.0, 4.0, 9)

    def rhs(_, z):
        u, v = z[:d], z[d:]
        g = X.T @ (y - X @ (u**depth - v**depth)) / n
        return np.concatenate([depth * u ** (depth - 1) * g, -depth * v ** (depth - 1) * g])

    sol = solve_ivp(rhs, (0, t[-1]), np.full(2 * d, alpha), method="DOP853", rtol=1e-12, atol=1e-14, t_eval=t)
    raw = (sol.y[:d] ** depth - sol.y[d:] ** depth).T
    np.testing.assert_allclose(theory.woodworth_tied_beta(t, X, y, alpha, depth), raw, rtol=1e-7, atol=1e-10)


def test_woodworth_h_is_odd_and_matches_its_definition():
    z = np.array([-0.5, 0.0, 0.3])
    np.testing.assert_allclose(theory.woodworth_h(z, 3), (1 - z) ** -3.0 - (1 + z) ** -3.0)
    np.testing.assert_allclose(theory.woodworth_h(-z, 4), -theory.woodworth_h(z, 4))


def test_saxe_time_refuses_targets_beyond_s():
    with pytest.raises(ValueError):
        theory.saxe_time(2.0, 1.0, 0.1, 3)

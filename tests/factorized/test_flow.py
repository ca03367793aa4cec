"""The exact flow of factorised models (docs/math.md, *Full weights: the exact flow*) against closed forms, direct
float64 integration and the diagonal engine; the conservation law; bad input (gradient descent: test_gd.py; the
sorting gauge: test_qr.py).

The default tests share one compilation: matrix factorisation of a 4×3 matrix, Kvaerno5, 21 output times.
"""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow import FactorizedModel, models
from gradflow._factorized._flow import _run
from gradflow._factorized._model import check_factors
from gradflow._factorized._qr import initial_state

SIG = np.array([3.0, 1.5, 0.0])
TS = np.linspace(0.0, 1.0, 21)
KW = dict(solver=gradflow.FactorizedSolver(method="kvaerno5"))


def _flow(model, u0, v0, **kw):
    return gradflow.simulate_flow(model, u0=u0, v0=v0, ts=TS, **KW, **kw)


def _aligned(seed=0):
    """``M = A diag(σ) Bᵀ`` and the balanced, aligned initialisation ``Ū = A diag(s̄)^{1/2}``, ``V̄ = B diag(s̄)^{1/2}``."""
    rng = np.random.default_rng(seed)
    A, _ = np.linalg.qr(rng.standard_normal((4, 3)))
    B, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    sbar = np.array([0.5, 2.0, 1.0])
    return (A * SIG) @ B.T, (A * np.sqrt(sbar),), (B * np.sqrt(sbar),), sbar


def _logistic(log_alpha, sbar):
    """Each singular mode of balanced, aligned matrix factorisation solves ``s' = 2 s (σ − s)`` from
    ``s(0) = α² s̄``: ``log s = log σ + log s(0) + 2σt − log(σ − s(0) + s(0) e^{2σt})``, ``t = τ log(1/α)``, so
    the r-th mode jumps at ``τ = 1/σ_r`` (``σ = 0``: ``s`` stays at ``s(0)``), in log space for any α."""
    t = TS[:, None] * -log_alpha
    ls0 = 2.0 * log_alpha + np.log(sbar)
    sig = np.where(SIG > 0, SIG, 1.0)
    grow = np.log(sig) + ls0 + 2 * SIG * t - np.logaddexp(np.log(sig - np.exp(ls0)), ls0 + 2 * SIG * t)
    return -np.sort(-np.where(SIG > 0, grow, ls0 + 0 * t), axis=1)


@pytest.mark.parametrize("log_alpha", [pytest.param(-1e4, marks=pytest.mark.slow), -50.0])  # slow: its fast twins
# are −50 here and the leaps' closed form at log α = −1e7 (tests/factorized/test_leap.py)
def test_matrix_factorization_closed_form(log_alpha):
    """The log singular values follow the scalar logistic per mode, far below float64's range included."""
    M, u0, v0, sbar = _aligned()
    model = models.matrix_factorization_model(M)
    res = _flow(model, u0, v0, log_alpha=log_alpha)  # simulate_flow's "auto" (the leaps): tests/factorized/test_leap.py
    assert res.stats["solver"] == "kvaerno5" and res.result == "successful"
    np.testing.assert_allclose(res.log_singular_values[0], _logistic(log_alpha, sbar), rtol=1e-9, atol=1e-6)
    # W is the float64 number: 0 below the range, the teacher after the last jump
    assert res.W[0].shape == (len(TS), 4, 3)
    np.testing.assert_allclose(res.W[0][-1], M, atol=1e-5)
    np.testing.assert_allclose(res.loss[-1], 0.5 * np.sum((res.W[0][-1] - M) ** 2), rtol=1e-10, atol=1e-20)


# the leaps and the split slow (their compilation): the leaps' fast twins are test_matrix_factorization_closed_form
# and tests/factorized/test_leap.py; the split's fast tests (its exponential, its choice of step) are in
# tests/factorized/test_split.py; Kvaerno5 stays fast
@pytest.mark.parametrize(
    "solver", ["kvaerno5", pytest.param("leap", marks=pytest.mark.slow), pytest.param("split", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("alpha", [1e-2, 1e-6])
def test_matches_direct_integration(alpha, solver):
    """Against DOP853 on the plain equations ``U' = G V``, ``V' = Gᵀ U`` (rtol 1e-12) from a Gaussian init, with
    Kvaerno5, with the plateau leaps (the default) and with the split integrator, which takes a split step at
    α = 1e-6 on τ ∈ [0, 2] (none at 1e-2, nor before τ = 1: explicit steps are not at their stability limit there)."""
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=1)
    M = task.teacher_beta[0]
    ts = 2.0 * TS if solver == "split" else TS
    res = gradflow.simulate_flow(
        task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=alpha, solver=gradflow.FactorizedSolver(method=solver)
    )
    assert res.stats["solver"] == solver
    if solver == "split" and alpha == 1e-6:
        assert res.stats["num_split_steps"] > 0
    L = -np.log(alpha)

    def rhs(t, y):
        U, V = y[:12].reshape(4, 3), y[12:].reshape(3, 3)
        G = M - U @ V.T
        return np.concatenate([(G @ V).ravel(), (G.T @ U).ravel()])

    y0 = alpha * np.concatenate([task.u0[0].ravel(), task.v0[0].ravel()])
    sol = scipy.integrate.solve_ivp(rhs, (0, ts[-1] * L), y0, "DOP853", t_eval=ts * L, rtol=1e-12, atol=1e-14 * alpha)
    W = np.array([y[:12].reshape(4, 3) @ y[12:].reshape(3, 3).T for y in sol.y.T])
    np.testing.assert_allclose(res.W[0], W, rtol=0, atol=1e-6)
    sv = np.linalg.svd(W, compute_uv=False)
    big = sv > 1e-6 * sv.max(axis=1, keepdims=True)  # the rest are below the reference's rounding
    np.testing.assert_allclose(res.log_singular_values[0][big], np.log(sv[big]), atol=1e-6)


@pytest.mark.slow  # fast twin: tests/factorized/test_leap.py::test_conservation_hypothesis
@settings(max_examples=4)
@given(seed=st.integers(0, 2**16), log_alpha=st.floats(-3.0, -0.5))
def test_conservation_hypothesis(seed, log_alpha):
    """``UᵀU − VᵀV`` is conserved (its spectrum: the column gauge ``Z → Z O`` rotates it), rebuilt from the state
    ``Z = Q diag(e^ρ) R̃`` at every recorded time, from random factors and teachers; at these α it is not below
    the rounding of ``Z``."""
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=seed)
    with jax.enable_x64(True):
        us, vs = check_factors(task.u0, task.v0, task.model)
        y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))
        out, _ = _run(
            task.model,
            y0,
            jnp.asarray(np.float64(log_alpha)),
            jnp.asarray(TS),
            0.0,
            1e-8,
            **KW,
            max_steps=None,
            batched=False,
            progress=None,
        )
    f = jax.tree_util.tree_map(np.asarray, out[0][0])
    Z = f.Q @ (np.exp(f.rho)[..., :, None] * f.R)
    U, V = Z[:, :4], Z[:, 4:]
    C = U.transpose(0, 2, 1) @ U - V.transpose(0, 2, 1) @ V
    C0 = np.exp(2 * log_alpha) * (us[0].T @ us[0] - vs[0].T @ vs[0])
    tol = 1e-7 * np.max(np.sum(Z**2, axis=(1, 2)))
    np.testing.assert_allclose(np.linalg.eigvalsh(C), np.broadcast_to(np.linalg.eigvalsh(C0), (len(TS), 3)), atol=tol)
    # the state's C̄ = C / α² is only rotated, by the sorting
    np.testing.assert_allclose(
        np.linalg.eigvalsh(f.C),
        np.broadcast_to(np.linalg.eigvalsh(C0), (len(TS), 3)) / np.exp(2 * log_alpha),
        atol=1e-12 * np.abs(f.C).max(),
    )


def test_bad_input():
    task = models.matrix_factorization(m=4, n=3, seed=0)
    m, u0, v0 = task.model, task.u0, task.v0
    ok = dict(u0=u0, v0=v0, ts=TS, alpha=1e-2)
    with pytest.raises(ValueError, match="u0\\[0\\] must have shape \\(4, 3\\)"):
        gradflow.simulate_flow(m, **{**ok, "u0": (u0[0].T,)})
    with pytest.raises(ValueError, match="v0\\[0\\] contains NaN or inf"):
        gradflow.simulate_flow(m, **{**ok, "v0": (np.full((3, 3), np.nan),)})
    with pytest.raises(ValueError, match="has rank 2 < width 3.*degenerate initialisation"):
        gradflow.simulate_flow(m, **{**ok, "u0": (np.zeros((4, 3)),), "v0": (np.diag([1.0, 1.0, 0.0]),)})
    with pytest.raises(ValueError, match="give the initial factors u0 and v0"):
        gradflow.simulate_flow(m, ts=TS, alpha=1e-2)
    with pytest.raises(ValueError, match="jacobian_rank applies to diagonal models only"):
        gradflow.simulate_flow(m, **ok, jacobian_rank=2)
    with pytest.raises(ValueError, match="alpha must lie in \\(0, 1\\)"):
        gradflow.simulate_flow(m, **{**ok, "alpha": 2.0})
    with pytest.raises(ValueError, match="ts must be strictly increasing"):
        gradflow.simulate_flow(m, **{**ok, "ts": TS[::-1]})
    with pytest.raises(ValueError, match="method must be one of"):
        gradflow.FactorizedSolver(method="euler")
    with pytest.raises(TypeError, match="solver must be a gradflow.FactorizedSolver for a FactorizedModel"):
        gradflow.simulate_flow(m, **ok, solver=gradflow.DiagonalSolver())
    with pytest.raises(TypeError, match="model must be a gradflow.DiagonalModel or a gradflow.FactorizedModel"):
        gradflow.simulate_gd(object(), u0=u0, v0=v0, alpha=0.1, lr=0.1, steps=1)
    with pytest.raises(ValueError, match="α must be a normal float64 number"):
        gradflow.simulate_gd(m, u0=u0, v0=v0, log_alpha=-1000.0, lr=0.1, steps=1)
    with pytest.raises(ValueError, match="full-batch gradient descent only"):
        gradflow.simulate_gd(m, u0=u0, v0=v0, alpha=0.1, lr=0.1, steps=1, optimizer="adam")


@pytest.mark.slow
@pytest.mark.parametrize("log_alpha", [-10.0, -1e4])
def test_one_by_one_factors_are_the_diagonal_engine(log_alpha):
    """``1×1`` weights ``W_i = u_i v_i`` are the diagonal model ``β = u ⊙ v``: the same flow, including a coordinate
    that grows, shrinks back below α and regrows with the other sign (``b`` from 1 down, up to 2)."""
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.9], [0.9, 1.0]])
    X = rng.standard_normal((200, 2))
    X = X @ np.linalg.inv(np.linalg.cholesky(X.T @ X / 200)).T @ np.linalg.cholesky(cov).T  # XᵀX/n = cov
    Y = X @ np.array([-1.0, 1.5])
    diag = models.diagonal_linear_model(X, Y)
    fact = FactorizedModel(lambda x, Ws: x[0] * Ws[0][0, 0] + x[1] * Ws[1][0, 0], X, Y, shapes=[(1, 1), (1, 1)])
    u0, v0 = np.array([1.0, 0.7]), np.array([0.3, -0.2])
    ts = np.linspace(0.0, 11.0, 45)
    d = gradflow.simulate_flow(diag, u0=u0, v0=v0, ts=ts, log_alpha=log_alpha)
    assert d.b.max() > 1.99 and d.b[:, 0].min() < 0.5  # the regrowth happens
    f = gradflow.simulate_flow(
        fact, u0=(u0[:1, None], u0[1:, None]), v0=(v0[:1, None], v0[1:, None]), ts=ts, log_alpha=log_alpha
    )
    hi, lo = np.maximum(d.log_w, d.log_wbar), np.minimum(d.log_w, d.log_wbar)
    log_beta = 2 * hi + np.log1p(-np.exp(2 * (lo - hi))) - np.log(4)  # log|β| = log|w² − w̄²| − log 4
    mine = np.concatenate([f.log_singular_values[0], f.log_singular_values[1]], axis=1)
    away = hi - lo > 1.0  # log|β| is ill-conditioned where β changes sign
    np.testing.assert_allclose(mine[away], log_beta[away], rtol=1e-9, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([f.W[0], f.W[1]], axis=1)[..., 0], d.beta, atol=1e-6)


@pytest.mark.slow
def test_attention_full_matches_direct_integration():
    """The full-weight attention toy against Diffrax Tsit5 (rtol 1e-11) on the plain factors at α = 1e-3."""
    task = models.attention_full(n=40, tokens=4, dim=4, seed=2)
    alpha, ts = 1e-3, np.linspace(0.0, 3.0, 13)
    res = gradflow.simulate_flow(task.model, u0=task.u0, v0=task.v0, ts=ts, alpha=alpha)

    with jax.enable_x64(True):

        def rhs(t, th, args):
            grads = jax.grad(lambda th: task.model.loss_value(*th))(th)
            return jax.tree_util.tree_map(lambda g: -g, grads)

        th0 = jax.tree_util.tree_map(lambda x: alpha * jnp.asarray(x), (task.u0, task.v0))
        L = -np.log(alpha)
        sol = dfx.diffeqsolve(
            dfx.ODETerm(rhs),
            dfx.Tsit5(),
            0.0,
            ts[-1] * L,
            None,
            th0,
            saveat=dfx.SaveAt(ts=ts * L),
            stepsize_controller=dfx.PIDController(rtol=1e-11, atol=1e-11 * alpha),
            max_steps=100_000,
        )
        us, vs = sol.ys
        for j in range(2):
            W = np.asarray(us[j] @ jnp.swapaxes(vs[j], 1, 2))
            np.testing.assert_allclose(res.W[j], W, atol=1e-6)


@pytest.mark.slow
def test_batched_over_alpha_is_the_runs_one_by_one():
    M, u0, v0, _ = _aligned(seed=3)
    model = models.matrix_factorization_model(M)
    las = np.array([-1e4, -50.0])
    ones = [_flow(model, u0, v0, log_alpha=la) for la in las]
    for batching in ("vmap", "separate"):
        batch = _flow(model, u0, v0, log_alpha=las, batching=batching)
        assert batch.loss.shape == (2, len(TS)) and batch.W[0].shape == (2, len(TS), 4, 3)
        assert list(batch.result) == ["successful"] * 2
        for i, one in enumerate(ones):
            np.testing.assert_allclose(batch.log_singular_values[0][i], one.log_singular_values[0], rtol=1e-9)
            np.testing.assert_allclose(batch.W[0][i], one.W[0], atol=1e-9)

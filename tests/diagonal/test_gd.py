"""simulate_gd: GD/SGD/Adam from small initialisation, against the flow and hand-written updates."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow import GDResult, evaluate_g, models, simulate_flow, simulate_gd

LIN = models.diagonal_linear(n=50, p=8, orthonormal=True, seed=0)
ALPHA = 1e-2


def _run(steps, tau=2.0):
    """GD over τ ∈ [0, tau] in ``steps`` steps, recorded at 41 times (the shape test_flow compiles for)."""
    lr = tau * np.log(1 / ALPHA) / steps
    return simulate_gd(LIN.model, alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=lr, steps=steps, record_every=steps // 40)


def test_result_fields_and_time_mapping():
    res = simulate_gd(LIN.model, alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=0.01, steps=60, record_every=20)
    assert isinstance(res, GDResult)
    np.testing.assert_array_equal(res.steps, [0, 20, 40, 60])
    np.testing.assert_allclose(res.ts, res.steps * 0.01 / np.log(1 / ALPHA))
    for name in ("u", "v", "beta", "b"):
        assert getattr(res, name).shape == (4, 8) and getattr(res, name).dtype == np.float64
    assert res.loss.shape == (4,)
    np.testing.assert_array_equal(res.u[0], ALPHA * LIN.u0)
    np.testing.assert_array_equal(res.beta, res.u * res.v)
    assert res.result == "successful" and res.message == ""


def test_divergence_is_reported_at_its_step():
    """L = ½(uv − 1)² with lr = 10 overshoots: the run is non_finite from the first step whose weights, loss or
    gradient is NaN or infinite (the same recursion in NumPy), its records after that step NaN."""
    model = gradflow.DiagonalModel(lambda x, beta: x @ beta, np.ones((1, 1)), np.ones(1), p=1)
    run = simulate_gd(model, u0=[1.0], v0=[0.5], alpha=0.5, lr=10.0, steps=40, throw=False)
    u, v, step = np.float64(0.5), np.float64(0.25), 0
    with np.errstate(all="ignore"):
        while np.all(np.isfinite([u, v, 0.5 * (u * v - 1.0) ** 2, 1.0 - u * v])):
            g = 1.0 - u * v
            u, v, step = u + 10.0 * v * g, v + 10.0 * u * g, step + 1
    assert 0 < step < 40 and run.result == "non_finite"
    assert f"became non-finite at step {step}: " in str(run.message) and "lower lr" in str(run.message)
    assert np.all(np.isfinite(run.loss[:step])) and np.all(np.isnan(run.loss[step + 1 :]))
    assert np.all(np.isnan(run.u[step + 1 :])) and np.all(np.isnan(run.v[step + 1 :]))
    with pytest.raises(RuntimeError, match=rf"^simulate_gd: .* at step {step}: .*Pass throw=False"):
        simulate_gd(model, u0=[1.0], v0=[0.5], alpha=0.5, lr=10.0, steps=40)


_TRACES = []


def _counting_h(x, beta):
    _TRACES.append(1)  # runs once per trace, never per step
    return x @ beta


def test_any_steps_and_record_every_reuse_one_compilation():
    """Runs of different lengths and recording intervals share the compiled block; records cut at any length."""
    model = gradflow.DiagonalModel(_counting_h, LIN.model.X, LIN.model.Y, p=LIN.model.p)
    kw = dict(alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=0.05)
    long = simulate_gd(model, steps=150, record_every=1, **kw)  # 150 records: blocks of 64, the last one partial
    assert long.u.shape == (151, LIN.model.p)
    # (steps, record_every, whether the block size is new): 140 and 50 records reuse the 64-record block;
    # 3 records use a block of 4 and 1 record a block of 1 (power-of-two sizes, each compiled once)
    for steps, every, new_block in ((140, 1, False), (150, 3, False), (150, 50, True), (120, 40, False), (7, 7, True)):
        before = len(_TRACES)
        res = simulate_gd(model, steps=steps, record_every=every, **kw)
        np.testing.assert_array_equal(res.u, long.u[: steps + 1 : every])
        assert (len(_TRACES) > before) == new_block, (steps, every)


def test_gd_matches_hand_written_updates():
    """θ ← θ − lr ∇_θ L with ∇_u L = −v ⊙ g, ∇_v L = −u ⊙ g (docs/math.md, *The loss and the sign convention*), in float64."""
    res = simulate_gd(LIN.model, alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=0.05, steps=30, record_every=30)
    X, Y = LIN.model.X, LIN.model.Y
    u, v = ALPHA * LIN.u0, ALPHA * LIN.v0
    for _ in range(30):
        g = X.T @ (Y - X @ (u * v)) / len(Y)
        u, v = u + 0.05 * v * g, v + 0.05 * u * g
    np.testing.assert_allclose(res.u[-1], u, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(res.v[-1], v, rtol=1e-12, atol=1e-300)


def test_gd_converges_to_the_flow_at_first_order():
    """β_GD − β_flow = O(lr): halving lr halves the gap (paper: GD follows the flow as lr → 0)."""
    runs = [_run(steps) for steps in (3000, 6000)]
    flow = simulate_flow(LIN.model, u0=LIN.u0, v0=LIN.v0, ts=runs[0].ts, alpha=ALPHA)
    gaps = [np.abs(r.beta - flow.beta).max() for r in runs]
    np.testing.assert_allclose(runs[1].ts, runs[0].ts)
    assert gaps[1] < 0.02
    assert 1.6 < gaps[0] / gaps[1] < 2.4, gaps
    np.testing.assert_allclose(runs[1].b, flow.b, atol=1e-2)


@settings(max_examples=5, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    alpha=st.floats(1e-3, 0.3),
    init=st.lists(st.floats(-2, 2).filter(lambda x: abs(x) > 0.05), min_size=8, max_size=8),
)
def test_conservation_along_small_step_gd(seed, alpha, init):
    """One GD step maps u² − v² to (u² − v²)(1 − lr² g²): with small lr the law holds to O(lr² · steps)."""
    model = models.diagonal_linear(n=12, p=4, seed=seed).model
    u0, v0 = np.array(init[:4]), np.array(init[4:])
    v0 = np.where(np.abs(np.abs(u0) - np.abs(v0)) < 1e-3, v0 * 0.5, v0)
    lr, steps = 1e-3, 2000
    res = simulate_gd(model, alpha=alpha, u0=u0, v0=v0, lr=lr, steps=steps, record_every=200)
    c0 = alpha**2 * (u0**2 - v0**2)
    g_max = np.abs(evaluate_g(model, res.beta)).max()
    bound = lr**2 * steps * (2 * g_max) ** 2  # Σ_k lr² g_k², with margin for g between records
    drift = np.abs(res.u**2 - res.v**2 - c0)
    assert np.all(drift <= bound * np.abs(c0) + 1e-14 * (res.u**2 + res.v**2)), (drift / np.abs(c0)).max()


def test_sgd_is_seeded_and_full_batch_sgd_is_gd():
    kw = dict(alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=0.02, steps=200, record_every=50, optimizer="sgd")
    a = simulate_gd(LIN.model, batch_size=10, seed=1, **kw)
    b = simulate_gd(LIN.model, batch_size=10, seed=1, **kw)
    c = simulate_gd(LIN.model, batch_size=10, seed=2, **kw)
    np.testing.assert_array_equal(a.u, b.u)
    assert not np.allclose(a.u[-1], c.u[-1], rtol=1e-6, atol=0)
    full = simulate_gd(LIN.model, batch_size=LIN.model.n, **kw)
    gd = simulate_gd(LIN.model, **{**kw, "optimizer": "gd"})
    np.testing.assert_allclose(full.u, gd.u, rtol=1e-12, atol=1e-300)


def test_adam_matches_optax_loop():
    res = simulate_gd(
        LIN.model, alpha=ALPHA, u0=LIN.u0, v0=LIN.v0, lr=0.01, steps=40, record_every=40, optimizer="adam"
    )
    with jax.enable_x64(True):
        opt = optax.adam(0.01)
        theta = (jnp.asarray(ALPHA * LIN.u0), jnp.asarray(ALPHA * LIN.v0))
        state = opt.init(theta)
        grad = jax.jit(jax.grad(lambda th: LIN.model.loss_value(th[0], th[1])))
        for _ in range(40):
            updates, state = opt.update(grad(theta), state, theta)
            theta = optax.apply_updates(theta, updates)
        u = np.asarray(theta[0])
    np.testing.assert_allclose(res.u[-1], u, rtol=1e-10)
    assert res.loss[-1] < res.loss[0]


def test_batched_alpha_equals_separate():
    kw = dict(u0=LIN.u0, v0=LIN.v0, lr=0.01, steps=300, record_every=100)
    both = simulate_gd(LIN.model, alpha=[1e-2, 1e-300], **kw)
    assert both.u.shape == (2, 4, 8) and both.ts.shape == (2, 4) and both.loss.shape == (2, 4)
    for k, a in enumerate((1e-2, 1e-300)):
        one = simulate_gd(LIN.model, alpha=a, **kw)
        np.testing.assert_allclose(both.u[k], one.u, rtol=1e-13, atol=0)
        np.testing.assert_allclose(both.ts[k], one.ts)
    assert np.all(np.isfinite(both.b))  # |u + v| is clipped to the float64 range, never log 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(alpha=0.0), r"alpha must lie in \(0, 1\)"),
        (dict(alpha=1.5), r"alpha must lie in \(0, 1\)"),
        (dict(u0=np.ones(2)), r"u0 must have shape \(8,\)"),
        (dict(v0=np.full(8, np.nan)), "v0 contains NaN"),
        (dict(lr=0.0), "lr must be a positive number"),
        (dict(steps=0), "steps must be a positive integer"),
        (dict(steps=10, record_every=3), "multiple of record_every"),
        (dict(optimizer="rmsprop"), "optimizer must be one of"),
        (dict(optimizer="sgd"), "needs a batch_size"),
        (dict(batch_size=5), "full-batch"),
        (dict(optimizer="sgd", batch_size=51), r"batch_size must be at most the number of samples, n=50"),
        (dict(optimizer="sgd", batch_size=0), "batch_size must be a positive integer"),
        (dict(seed=-1), "seed must be a non-negative integer"),
        (dict(alpha=None, log_alpha=-800.0), r"α must be a normal float64 number.*use simulate_flow"),
        (dict(alpha=1e-310), r"α must be a normal float64 number"),
        (dict(log_alpha=-3.0), "exactly one of alpha"),
    ],
)
def test_bad_input_raises(kwargs, match):
    base = dict(alpha=1e-3, u0=LIN.u0, v0=LIN.v0, lr=0.01, steps=10)
    with pytest.raises(ValueError, match=match):
        simulate_gd(LIN.model, **{**base, **kwargs})


def test_log_alpha_is_the_same_scale():
    """``log_alpha=`` trains from α = exp(log α), recorded as given, as for simulate_flow (batched too)."""
    kw = dict(u0=LIN.u0, v0=LIN.v0, lr=0.01, steps=300, record_every=100)
    la = np.log(np.array([1e-2, 1e-300]))
    by_log = simulate_gd(LIN.model, log_alpha=la, **kw)
    by_alpha = simulate_gd(LIN.model, alpha=np.exp(la), **kw)
    np.testing.assert_array_equal(by_log.alpha, np.exp(la))
    np.testing.assert_array_equal(by_log.log_alpha, la)
    np.testing.assert_array_equal(by_log.u, by_alpha.u)
    np.testing.assert_allclose(by_log.ts, by_alpha.ts, rtol=1e-15)
    assert isinstance(by_log, gradflow.Trajectory)


def test_degenerate_initialisation_rejected():
    with pytest.raises(ValueError, match=r"coordinates \[0\]"):
        simulate_gd(LIN.model, alpha=1e-3, u0=np.r_[1.0, LIN.u0[1:]], v0=np.r_[-1.0, LIN.v0[1:]], lr=0.01, steps=10)

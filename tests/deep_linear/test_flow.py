"""The deep linear family's exact flow (docs/deep-linear.md, *The exact flow*): against Saxe's closed form (one fast
run; L = 2, 3, 4 at α = 1e-2, 1e-3 slow), DOP853 on the raw layers and the factorised family at depth 2 (slow: each
compiles a flow). The model's checks and the layer velocities are in test_model.py, the refused range in
test_checks.py."""

import warnings

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, whitened
from scipy.integrate import solve_ivp

import gradflow
import theory
from gradflow._deep_linear import _flow
from gradflow._deep_linear._model import layer_velocities, product


def rescaled(t, alpha, depth):
    return t * alpha ** (depth - 2) if depth > 2 else t / np.log(1 / alpha)


def crossing_errors(flow, ts, depth, alpha, s=S, a0=A0, bases=None):
    """The flow's half-way times' errors in τ against Saxe's closed form: the flow's ``σ_r`` at the closed form's
    half-way time ``τ_r`` (recorded at ``ts``), off ``s_r/2`` by ``δσ``, is ``δσ / (dσ/dτ)`` late. ``bases = (U, V)``:
    the task's singular bases (the identity: None)."""
    W = flow.W if bases is None else bases[0].T @ flow.W @ bases[1]
    sigma = np.diagonal(W, axis1=-2, axis2=-1)
    errors = []
    for r in range(len(s)):
        tau = rescaled(theory.saxe_time(s[r] / 2, s[r], (alpha * a0[r]) ** depth, depth), alpha, depth)
        k = int(np.argmin(np.abs(ts - tau)))
        assert ts[k] == pytest.approx(tau, rel=1e-14)
        rate = rescaled(1.0, alpha, depth) ** -1 * depth * (s[r] / 2) ** (2 - 2 / depth) * (s[r] / 2)
        errors.append((sigma[k, r] - s[r] / 2) / rate)
    return np.array(errors)


def saxe_taus(depth, alpha, s=S, a0=A0):
    """Saxe's half-way times ``τ_r`` of the modes (closed form)."""
    return np.array(
        [rescaled(theory.saxe_time(s[r] / 2, s[r], (alpha * a0[r]) ** depth, depth), alpha, depth) for r in range(3)]
    )


def half_way_times(depth, alpha, s=S, a0=A0):
    taus = saxe_taus(depth, alpha, s, a0)
    return np.sort(np.array([0.0, *taus, 1.3 * max(taus)]))


def test_flow_crosses_at_saxes_times():
    """One compiled flow (L = 3, two scales in a batch): the half-way times within 1e-6 of Saxe's closed form, the
    balance conserved, ``b`` from 1 to 0, the batched result sliced by α, and ``max_steps``."""
    depth, alphas = 3, np.array([1e-2, 3e-3])
    ts = half_way_times(depth, alphas[0])
    model = whitened(depth)
    flow = gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas)
    assert flow.W.shape == (2, len(ts), 3, 3) and flow.b.shape == (2, len(ts), 3)
    np.testing.assert_array_less(np.abs(crossing_errors(flow[0], ts, depth, alphas[0])), 1e-6)
    one = flow[1]
    assert float(one.log_alpha) == pytest.approx(np.log(3e-3)) and one.W.shape == (len(ts), 3, 3)
    state = one.state_at(2)
    np.testing.assert_allclose(state.W, product(state.layers), rtol=1e-12, atol=1e-15)
    for l in range(depth - 1):  # balanced at the start: W_{l+1}ᵀ W_{l+1} = W_l W_lᵀ for all time
        Wl, Wn = one.layers[l], one.layers[l + 1]
        gap = np.swapaxes(Wn, -1, -2) @ Wn - Wl @ np.swapaxes(Wl, -1, -2)
        np.testing.assert_allclose(gap, 0.0, atol=1e-8 * np.abs(Wn).max() ** 2)
    np.testing.assert_allclose(one.b[0], 1.0 + np.log(A0[np.argsort(-A0)]) / np.log(3e-3), rtol=1e-12)
    np.testing.assert_allclose(one.b[-1], np.log(S) / (depth * np.log(3e-3)), atol=1e-6)
    assert one.stats["num_steps"] < 1000, one.stats
    short = gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas[0], max_steps=20, throw=False)
    assert short.result == "max_steps_reached" and "max_steps=20" in str(short.message)
    assert np.isnan(short.loss[-1]) and short.stats["num_steps"] == 20
    with pytest.raises(RuntimeError, match="max_steps=20"):
        gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alphas[0], max_steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("alpha", [1e-2, 1e-3])
def test_saxe_half_way_times(depth, alpha):
    """Saxe's per-mode law (SPEC oracle; ``theory.saxe_time``, the ₂F₁ closed form): the flow's half-way times within
    1e-6 in τ (measured: ≤ 1e-7 at L = 3, 4)."""
    ts = half_way_times(depth, alpha)
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha)
    np.testing.assert_array_less(np.abs(crossing_errors(flow, ts, depth, alpha)), 1e-6)


def test_flow_below_the_old_stiffness_bound():
    """L = 4 at α = 1e-4 (the stiffness bound was α ≥ 9.4e-4 while Newton stopped on the stages' velocity: at
    α = 3e-4 the flow stalled at τ = 0.39 after 20,000 steps): the half-way times within 1e-6 (measured: 7e-9)."""
    depth, alpha = 4, 1e-4
    ts = half_way_times(depth, alpha)
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha)
    np.testing.assert_array_less(np.abs(crossing_errors(flow, ts, depth, alpha)), 1e-6)
    assert flow.stats["num_steps"] < 1200, flow.stats  # measured: 866


@pytest.mark.parametrize("free", [False, True])
def test_settled_stages_converge_at_every_step(free):
    """At the settled flow (L = 4, α = 3e-4: every mode learned, ``‖J‖ = 2.3e8``) Kvaerno5's stages converge from
    ``h = 1e-9`` to ``1e-2`` (optimistix's Newton, stopped on the velocity, failed every one from 1e-8), the step stays
    on the fixed point and its error estimate far below the tolerance; with Newton's equations solved by LU or
    matrix-free (``free``)."""
    with jax.enable_x64(True):  # as gradflow solves
        depth, alpha, atol = 4, 3e-4, 1e-8
        model = whitened(depth)
        layers = tuple(jnp.asarray(np.diag(S ** (1 / depth)) / alpha) for _ in range(depth))
        solve = _flow._solve_of(model, jnp.asarray(np.log(alpha)), jnp.array([0.0, 1.0]), 0.0, atol, free)
        terms = dfx.ODETerm(_flow.vector_field)

        @eqx.filter_jit
        def step(h):
            t0, t1 = jnp.zeros(()), h
            state = solve.solver.init(terms, t0, t1, layers, solve.args)
            return solve.solver.step(terms, t0, t1, layers, solve.args, state, jnp.array(False))

        for h in 10.0 ** np.arange(-9, -1):
            y1, y_error, _, _, result = step(jnp.asarray(h))
            assert result == dfx.RESULTS.successful, h
            for w, w1, e in zip(layers, y1, y_error):
                np.testing.assert_allclose(w1, w, rtol=1e-12, atol=1e-9)
                assert np.max(np.abs(e) / (atol + atol * np.abs(w))) < 1e-3, h


@pytest.mark.slow
@pytest.mark.parametrize(("depth", "alpha"), [(3, 3e-7), (4, 3e-5), (5, 1e-3), (6, 6e-3)])
def test_saxe_at_the_smallest_scales(depth, alpha):
    """At the smallest α the stated range takes (atol = 1e-8; L = 3 at 2.2e-7 from the sleeping layers' scale, L ≥ 4
    from the stiffness): the half-way times within 1e-6 in τ and 1e-6 relative (measured: 1.6e-7 at L = 3, ≤ 1e-8 at
    L ≥ 4)."""
    ts = half_way_times(depth, alpha)
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, alpha=alpha)
    errors = np.abs(crossing_errors(flow, ts, depth, alpha))
    np.testing.assert_array_less(errors, 1e-6)
    np.testing.assert_array_less(errors, 1e-6 * saxe_taus(depth, alpha))


def rotated(depth, seed=3):
    """The whitened task rotated, ``M = U diag(S) Vᵀ`` (random ``U``, ``V``), from its balanced aligned start with
    random hidden bases: every entry mixes the modes, learned and asleep. Returns the model, the start and ``(U, V)``."""
    rng = np.random.default_rng(seed)

    def orthogonal():
        q, r = np.linalg.qr(rng.standard_normal((3, 3)))
        return q * np.sign(np.diag(r))

    U, V = orthogonal(), orthogonal()
    bases = [V] + [orthogonal() for _ in range(depth - 1)] + [U]
    W0 = tuple(bases[l + 1] @ np.diag(A0) @ bases[l].T for l in range(depth))
    X, Y = np.sqrt(3) * np.eye(3), np.sqrt(3) * (U @ np.diag(S) @ V.T).T  # rows: the samples
    return gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 3), depth=depth), W0, (U, V)


@pytest.mark.slow
@pytest.mark.parametrize(("depth", "alpha"), [(3, 1e-4), (4, 1e-4), (4, 3e-5)])
def test_saxe_on_a_rotated_task(depth, alpha):
    """Learned and sleeping modes in the same entries, where the stiffness bound comes from (``_checks.STIFFNESS``;
    L = 4 at 3e-5 is its edge): the half-way times within 1e-5 relative (measured at L = 3, α = 1e-4: 2.6e-6 for the
    modes that wake next to a learned one, 2.5e-6 before Newton stopped on the state; ≤ 2e-8 at L = 4)."""
    model, W0, bases = rotated(depth)
    ts = half_way_times(depth, alpha)
    flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
    errors = np.abs(crossing_errors(flow, ts, depth, alpha, bases=bases))
    np.testing.assert_array_less(errors, 1e-5 * saxe_taus(depth, alpha))
    assert flow.stats["num_steps"] < 4000, flow.stats


def raw_layer_flow(model, W0, alpha, t):
    """DOP853 on the raw layers ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` from ``W_l(0) = α W0_l``, in the unscaled time."""
    shapes = model.layer_shapes
    sizes = [a * b for a, b in shapes]
    gradient = eqx.filter_jit(lambda model, W: model.G(W))

    def unpack(y):
        return [y[o : o + k].reshape(s) for o, k, s in zip(np.cumsum([0, *sizes[:-1]]), sizes, shapes)]

    def rhs(_, y):
        layers = unpack(y)
        G = np.asarray(gradient(model, product(layers)))
        return np.concatenate([v.ravel() for v in layer_velocities(layers, G)])

    y0 = np.concatenate([alpha * w.ravel() for w in W0])
    with jax.enable_x64(True):  # G in float64, as gradflow computes it
        sol = solve_ivp(rhs, (0.0, t[-1]), y0, method="DOP853", rtol=1e-12, atol=1e-14, t_eval=t)
    assert sol.success
    return np.stack([product(unpack(y)) for y in sol.y.T])


@pytest.mark.slow
def test_flow_matches_dop853_on_the_raw_layers():
    """A rectangular 3×2 regression, widths (4, 3), an unbalanced Gaussian start at α = 0.1 and L = 3: W within
    1e-6 of DOP853's on the raw layers."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((12, 2))
    Y = X @ np.array([[2.0, -1.0], [0.5, 1.5], [1.0, 0.0]]).T
    model = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(3, 2), depth=3, widths=(4, 3))
    W0 = tuple(rng.standard_normal(s) for s in model.layer_shapes)
    alpha, ts = 0.1, np.linspace(0.0, 1.5, 7)
    flow = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
    reference = raw_layer_flow(model, W0, alpha, ts / alpha)
    np.testing.assert_allclose(flow.W, reference, atol=1e-6 * np.abs(reference).max())


@pytest.mark.slow
def test_depth_two_is_the_factorised_flow():
    """At L = 2, ``W = W_2 W_1 = U Vᵀ`` with ``U = W_2``, ``V = W_1ᵀ``: the factorised family's flow, and the same ``b``."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((10, 3))
    Y = X @ np.array([[1.5, 0.0, -1.0], [0.0, 0.7, 0.3]]).T
    deep = gradflow.DeepLinearModel(lambda x, W: W @ x, X, Y, shape=(2, 3), depth=2, widths=2)
    fact = gradflow.FactorizedModel(lambda x, Ws: Ws[0] @ x, X, Y, shapes=[(2, 3)], widths=[2])
    W1, W2 = rng.standard_normal((2, 3)), rng.standard_normal((2, 2))
    ts, alpha = np.linspace(0.0, 2.0, 9), 1e-3
    a = gradflow.simulate_flow(deep, u0=(W1, W2), ts=ts, alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gradflow.AssumptionWarning)
        b = gradflow.simulate_flow(fact, u0=(W2,), v0=(W1.T,), ts=ts, alpha=alpha)
    np.testing.assert_allclose(a.W, b.W[0], atol=1e-6)
    np.testing.assert_allclose(a.b, b.b[0], atol=1e-6)


def test_sleeping_singular_values_are_read_beside_learned_ones():
    """Layers in units of α holding one learned mode (of order 1/α per layer) and two sleeping ones (of order 1), in
    random bases of every space: the product's singular values are the products of the layers' own, ``α^{−3}`` apart,
    which an SVD of the product does not resolve (it returns ``eps σ_1``); ``graded_singular_values`` holds each to
    ``1e-6`` of its log at α = 1e-8."""
    rng = np.random.default_rng(3)
    alpha, depth = 1e-8, 3
    scales = np.array([[2.0 / alpha, 0.7, 0.3], [1.5 / alpha, 1.1, 0.5], [1.0 / alpha, 0.9, 0.8]])
    R = [np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(depth + 1)]
    layers = [R[l + 1] @ np.diag(scales[l]) @ R[l].T for l in range(depth)]
    exact = np.sort(np.prod(scales, axis=0))[::-1]
    with jax.enable_x64(True):
        graded = np.asarray(_flow.graded_singular_values([jax.numpy.asarray(w) for w in layers], np.log(alpha)))
    plain = np.linalg.svd(product(layers), compute_uv=False)
    assert np.abs(np.log(plain[1:] / exact[1:])).max() > 1.0  # what the product's SVD gives: rounding
    np.testing.assert_allclose(np.log(graded), np.log(exact), atol=1e-6)


def _factorisation(n, depth=3):
    """Deep matrix factorisation of an ``n × n`` teacher of rank 5 (5, 4, 3, 2, 1) from a Gaussian start (seed 0)."""
    return gradflow.models.deep_matrix_factorization(
        m=n, n=n, depth=depth, singular_values=(5.0, 4.0, 3.0, 2.0, 1.0), aligned=False
    )


def test_matrix_free_is_the_dense_integration():
    """5×5 layers (75 entries; ``newton="auto"`` solves 10 × 10 matrix-free, 5 × 5 dense) at α = 1e-3 through three
    jumps: Newton's equations solved by GMRES give the flow of the dense Jacobian's LU, the same steps, the learned
    modes' ``log σ`` within 1e-9 and the sleeping ones' within 1e-4 (entries of the size of ``atol``: at 10 × 10 both
    are 4e-5 from a run at ``atol = 1e-11``)."""
    task = _factorisation(5)
    assert _flow.matrix_free(_factorisation(10).model, gradflow.DeepLinearSolver())
    assert not _flow.matrix_free(task.model, gradflow.DeepLinearSolver())
    ts = np.linspace(0.0, 0.45, 10)
    runs = {
        newton: gradflow.simulate_flow(
            task.model, u0=task.u0, ts=ts, alpha=1e-3, solver=gradflow.DeepLinearSolver(newton=newton)
        )
        for newton in ("matrix_free", "dense")
    }
    free, dense = runs["matrix_free"], runs["dense"]
    assert free.result == dense.result == gradflow.RESULTS.successful
    assert abs(int(free.stats["num_steps"]) - int(dense.stats["num_steps"])) <= 0.05 * dense.stats["num_steps"]
    learned = dense.log_singular_values > -1.0
    assert np.sum(learned[-1]) >= 3
    gap = np.abs(free.log_singular_values - dense.log_singular_values)
    assert 0.0 < gap.max() < 1e-4  # two solves, not one program run twice
    assert gap[learned].max() < 1e-9


@pytest.mark.slow
def test_layers_of_a_hundred_at_moderate_alpha():
    """100 × 100 layers (L = 3: 30,000 entries, whose dense Jacobian, 6.7 GiB, was refused before Newton's equations
    were solved matrix-free) at α = 1e-3: the five modes learned, each crossing half its value (interpolated between
    outputs) within 2.5e-3 in τ of the greedy limit's jump (the flow is off by ``O(α)``: at most 1.1e-3 on the
    output grid, whose jumps are 6.7e-3 to 0.064 apart), and the loss near 0. About 4 minutes on two cores."""
    task = _factorisation(100)
    greedy = gradflow.greedy_limit(task.model, u0=task.u0)
    ts = np.linspace(0.0, 1.3 * greedy.times[-1], 131)
    flow = gradflow.simulate_flow(task.model, u0=task.u0, ts=ts, alpha=1e-3)
    assert flow.result == gradflow.RESULTS.successful
    half = np.log(np.array([5.0, 4.0, 3.0, 2.0, 1.0]) / 2)
    for r in range(5):
        k = np.argmax(flow.log_singular_values[:, r] > half[r])
        before, after = flow.log_singular_values[k - 1 : k + 1, r]
        crossed = ts[k - 1] + (ts[k] - ts[k - 1]) * (half[r] - before) / (after - before)
        assert abs(crossed - greedy.times[r + 1]) < 2.5e-3, (r, crossed, greedy.times)
    assert flow.loss[-1] < 1e-10

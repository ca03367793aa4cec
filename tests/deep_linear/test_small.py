"""The deep linear flow at small α (docs/deep-linear.md, *Small α*; gradflow/_deep_linear/_small.py): Saxe's stage
times at log α = −1000 and −1e4 (one path, whatever α), the jump placed on Saxe's closed form at α = 5e-11, the
direct integration at α = 1e-5 (slow), Ctrl-C, and a batch across both ranges."""

import math

import jax
import numpy as np
import pytest
from deep_linear_common import A0, S, aligned, whitened

import gradflow
import theory
from gradflow._deep_linear import _flow, _small
from gradflow._deep_linear._checks import small_log_alpha


def saxe_stage_times(depth):
    """``T_r = (a⁰_r)^{−(L−2)} / ((L−2) s_r)``, in the order the modes are learned."""
    return np.sort(A0 ** (-(depth - 2)) / ((depth - 2) * S))


def learned(flow):
    """How many singular values are learned (``b < 1/2``) at each output time."""
    return np.sum(flow.b < 0.5, axis=-1)


@pytest.mark.parametrize("depth", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_stages_at_saxes_times_far_below_float64(depth):
    """log α = −1000 and −1e4 in one batch: mode r learned between ``T_r (1 ∓ 1e-6)`` (Saxe's limit), the end at
    ``diag(s)``, ``b`` of a sleeping mode at ``1 + log a⁰/log α`` (``1/L log α`` of ``(α a⁰)^L``), the same path (and
    steps) for both."""
    T = saxe_stage_times(depth)
    ts = np.sort(np.concatenate([[0.0, 0.1], T * (1 - 1e-6), T * (1 + 1e-6), [1.5 * T[-1]]]))
    flow = gradflow.simulate_flow(whitened(depth), u0=aligned(depth), ts=ts, log_alpha=np.array([-1000.0, -1e4]))
    assert list(flow.result) == ["successful"] * 2
    for run in (flow[0], flow[1]):
        count = learned(run)
        for r, t in enumerate(T):
            assert (
                count[np.searchsorted(ts, t * (1 - 1e-6))] == r and count[np.searchsorted(ts, t * (1 + 1e-6))] == r + 1
            )
        np.testing.assert_allclose(run.W[-1], np.diag(S), atol=1e-8)
        np.testing.assert_allclose(run.b[0], 1.0 + np.log(np.sort(A0)[::-1]) / run.log_alpha, rtol=1e-12)
    np.testing.assert_allclose(flow[0].W, flow[1].W, atol=1e-300)
    assert flow.stats["num_steps"][0] == flow.stats["num_steps"][1] < 2000


def test_jump_follows_saxes_closed_form():
    """At α = 5e-11 (L = 3) the first jump is about 1e-7 wide in τ: the flow sampled across it crosses ``s_1/2``
    where Saxe's closed form does, to 1e-3 of the jump's width, and is continuous where the jump takes over."""
    depth, alpha = 3, 5e-11
    model = whitened(depth)
    with jax.enable_x64(True):  # as simulate_flow runs it
        stages, *_ = _small.path(model, aligned(depth), 1.0, rtol=0.0, atol=1e-8, max_steps=None, progress=False)
    start = stages[0].jump_start(math.log(alpha))
    width = alpha * stages[0].t_end
    ts = np.concatenate([[0.0], start + width * np.linspace(-0.01, 1.0, 2001)])
    flow = gradflow.simulate_flow(model, u0=aligned(depth), ts=ts, alpha=alpha)
    sigma = np.exp(flow.log_singular_values[:, 0])
    crossing = np.interp(S[0] / 2, sigma[1:], ts[1:])
    exact = theory.saxe_time(S[0] / 2, S[0], (alpha * A0[0]) ** depth, depth) * alpha
    assert abs(crossing - exact) < 1e-3 * width, (crossing - exact) / width
    # where the jump takes over from the plateau's closed form, log σ_1 grows on as smoothly as on either side
    steps = np.diff(flow.log_singular_values[1:, 0])
    j = int(np.searchsorted(ts[1:], start)) - 1  # the step across the handover
    np.testing.assert_allclose(steps[j - 1 : j + 2], steps[j - 2], rtol=1e-2)


def test_interrupted_path_keeps_what_it_finished(monkeypatch):
    """Ctrl-C after the first jump: ``gradflow.Interrupted`` carrying the flow, ``"interrupted"``, the outputs before
    ``T_1`` kept, those after it +inf."""
    T = saxe_stage_times(3)

    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(_small, "check_interrupt", interrupt)
    ts = np.array([0.0, 0.5 * T[0], 0.5 * (T[0] + T[1]), T[-1] + 1.0])
    with pytest.raises(gradflow.Interrupted) as stop:
        gradflow.simulate_flow(whitened(3), u0=aligned(3), ts=ts, log_alpha=-1000.0)
    flow = stop.value.result
    assert flow.result == "interrupted" and "Ctrl-C" in str(flow.message)
    assert np.all(np.isfinite(flow.W[:2])) and np.all(np.isinf(flow.W[2:])) and np.all(np.isnan(flow.loss[2:]))


def test_scales_between_the_ranges_are_refused():
    """At ``atol = 1e-12``, L = 6: α = 5e-14 lies between the small-α path (α ≤ 1e-14) and the split (α ≥ 1e-13);
    at L = 2 small α is the factorised family's."""
    with pytest.raises(ValueError, match=r"log α ≤ -32\.24 \(α ≤ 1e-14\)"):
        gradflow.simulate_flow(whitened(6), u0=aligned(6), ts=[0.0, 1.0], alpha=5e-14, atol=1e-12)
    assert small_log_alpha(0.0, 1e-8) == pytest.approx(math.log(1e-10))
    with pytest.raises(ValueError, match="FactorizedModel"):
        gradflow.simulate_flow(whitened(2), u0=aligned(2), ts=[0.0, 1.0], log_alpha=-1000.0)


def test_a_batch_across_the_ranges_keeps_its_order():
    """The merge of the paths' runs puts each in its place, and a count one path does not keep reads −1."""

    def fake(log_a, value, stats):
        n = len(log_a)
        return gradflow.DeepLinearFlowResult(
            ts=np.arange(2.0),
            layers=(np.full((n, 2, 1, 1), value),),
            W=np.full((n, 2, 1, 1), value),
            log_singular_values=np.full((n, 2, 1), value),
            loss=np.full((n, 2), value),
            log_alpha=np.asarray(log_a),
            stats=dict(stats, max_steps=None),
            result=np.full(n, "successful"),
            message=np.full(n, ""),
        )

    small = np.array([False, True, False, True, False])
    split = np.array([False, False, False, False, True])
    direct = fake([-1.0, -2.0], 1.0, dict(num_steps=np.array([5, 6]), num_rejected_steps=np.array([1, 2])))
    limit = fake([-1e3, -1e4], 2.0, dict(num_steps=np.array([7, 7]), num_stages=np.array([3, 3])))
    between = fake([-20.0], 3.0, dict(num_steps=np.array([9]), num_frame_turns=np.array([4])))
    out = _flow._merged([(small, limit), (split, between), (~(small | split), direct)])
    np.testing.assert_array_equal(out.log_alpha, [-1.0, -1e3, -2.0, -1e4, -20.0])
    np.testing.assert_array_equal(out.W[:, 0, 0, 0], [1.0, 2.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(out.stats["num_steps"], [5, 7, 6, 7, 9])
    np.testing.assert_array_equal(out.stats["num_rejected_steps"], [1, -1, 2, -1, -1])
    np.testing.assert_array_equal(out.stats["num_stages"], [-1, 3, -1, 3, -1])
    np.testing.assert_array_equal(out.stats["num_frame_turns"], [-1, -1, -1, -1, 4])


@pytest.mark.slow
def test_small_alpha_path_is_the_direct_flow_to_order_alpha():
    """A Gaussian start (L = 3): the small-α path's outputs at α = 1e-5 and 1e-4 against the direct integration's at
    the same α, away from the jumps: ``W`` to 1e-9, the logs of the singular values to 1e-4 (the stage times' own
    error, about 1e-7 relative, near a blow-up) and, from 1e-4 to 1e-5, no worse."""
    depth = 3
    model = whitened(depth)
    rng = np.random.default_rng(0)
    W0 = tuple(rng.standard_normal((3, 3)) for _ in range(depth))  # stage times 0.344, 0.472, beyond 1.5
    ts = np.linspace(0.0, 1.5, 31)
    with jax.enable_x64(True):  # as simulate_flow runs it
        limit = _small.flow(model, W0, ts, np.log([1e-4, 1e-5]), rtol=0.0, atol=1e-8, max_steps=None, progress=False)
    errors = []
    for i, alpha in enumerate((1e-4, 1e-5)):
        direct = gradflow.simulate_flow(model, u0=W0, ts=ts, alpha=alpha)
        np.testing.assert_allclose(limit[i].W, direct.W, atol=1e-9)
        errors.append(np.abs(limit[i].log_singular_values - direct.log_singular_values).max())
    assert errors[1] < 1e-4 and errors[1] <= errors[0], errors

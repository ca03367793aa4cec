"""Gradient descent on the factors (gradflow/_factorized/_gd.py): first order in lr to the exact flow, and one
compilation for any α, step count and record interval."""

import numpy as np
from aligned_mf import TS

import gradflow
from gradflow import models


def test_gd_is_the_flow_as_lr_goes_to_zero():
    """Gradient descent's error against the flow is first order in lr (halving lr halves it)."""
    task = models.matrix_factorization(m=4, n=3, singular_values=(3.0, 1.5), seed=1)
    flow = gradflow.simulate_flow(
        task.model, u0=task.u0, v0=task.v0, ts=TS, alpha=1e-2, solver=gradflow.FactorizedSolver(method="kvaerno5")
    )
    L = np.log(1e2)
    errs = []
    for k in (50, 100):  # records land on TS: τ step 0.05 = k lr / L
        gd = gradflow.simulate_gd(
            task.model, u0=task.u0, v0=task.v0, alpha=1e-2, lr=0.05 * L / k, steps=20 * k, record_every=k
        )
        np.testing.assert_allclose(gd.ts, TS, atol=1e-12)
        errs.append(np.abs(gd.W[0] - flow.W[0]).max())
    assert 1.8 < errs[0] / errs[1] < 2.2 and errs[1] < 0.05


_GD_TRACES = []


def _counting_product(x, Ws):
    _GD_TRACES.append(1)  # runs once per trace: counts compilations
    return x @ Ws[0] @ x


def test_gd_at_any_alpha_steps_and_record_every_reuses_one_compilation():
    """GD's records come in blocks of 64 per compiled call, α and the record interval as data: the float64 GD of a
    demo at several α (different step counts and intervals) compiles once; records cut at any length."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3))
    model = gradflow.FactorizedModel(_counting_product, X, np.einsum("si,ij,sj->s", X, np.eye(3), X), shapes=[(3, 3)])
    kw = dict(u0=(np.eye(3),), v0=(np.eye(3),), lr=0.01)
    long = gradflow.simulate_gd(model, alpha=1e-2, steps=200, record_every=1, **kw)  # blocks of 64, the last partial
    traced = len(_GD_TRACES)
    for alpha, steps, every in ((1e-2, 150, 3), (1e-2, 120, 2), (1e-4, 130, 1), (1e-8, 192, 3)):
        run = gradflow.simulate_gd(model, alpha=alpha, steps=steps, record_every=every, **kw)
        assert run.W[0].shape == (steps // every + 1, 3, 3)
        if alpha == 1e-2:
            np.testing.assert_array_equal(run.W[0], long.W[0][: steps + 1 : every])
    assert len(_GD_TRACES) == traced

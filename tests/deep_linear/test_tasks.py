"""The deep linear family's built-in tasks: shapes, the teacher as the known optimum, the aligned start's balance and
Saxe's stage times through the greedy limit, bad arguments refused with their names, and a sweep over them."""

import csv

import jax
import numpy as np
import pytest

import gradflow
from gradflow import models
from gradflow._cli import main
from gradflow._deep_linear._model import product
from gradflow._deep_linear._tasks import saxe_times


def _loss_and_gradient(model, W):
    with jax.enable_x64(True):
        return float(model.loss_of_weights(W)), np.asarray(model.G(W))


@pytest.mark.parametrize("aligned", [True, False])
def test_deep_matrix_factorization_shapes_and_teacher(aligned):
    task = models.deep_matrix_factorization(m=5, n=3, depth=4, singular_values=(2.0, 0.5), aligned=aligned, seed=2)
    model, M = task.model, task.teacher_beta
    assert task.name == "deep_matrix_factorization" and task.v0 is None
    assert model.shape == (5, 3) and model.depth == 4 and model.widths == (3, 3, 3)
    assert [w.shape for w in task.u0] == [(3, 3), (3, 3), (3, 3), (5, 3)] == list(model.layer_shapes)
    np.testing.assert_allclose(np.linalg.svd(M, compute_uv=False), [2.0, 0.5, 0.0], atol=1e-14)
    loss, G = _loss_and_gradient(model, M)  # the teacher is the optimum: L(W*) = 0, ∇L(W*) = 0
    assert loss == 0.0 and np.max(np.abs(G)) == 0.0
    W = np.random.default_rng(0).standard_normal((5, 3))
    loss, G = _loss_and_gradient(model, W)
    assert loss == pytest.approx(0.5 * np.sum((W - M) ** 2), rel=1e-13)
    np.testing.assert_allclose(G, M - W, atol=1e-14)
    assert (
        task.config == dict(m=5, n=3, depth=4, singular_values=(2.0, 0.5), aligned=aligned, width=3, seed=2)
        and models.TASKS["deep_matrix_factorization"].family == "deep_linear"
    )


def test_the_aligned_start_is_balanced_and_holds_the_teachers_singular_vectors():
    task = models.deep_matrix_factorization(m=4, n=6, depth=3, singular_values=(3.0, 1.0), width=5)
    layers = task.u0
    for lower, upper in zip(layers[:-1], layers[1:]):  # W_{l+1}ᵀ W_{l+1} = W_l W_lᵀ
        np.testing.assert_allclose(upper.T @ upper, lower @ lower.T, atol=1e-14)
    U, s, Vt = np.linalg.svd(task.teacher_beta)
    P = product(layers)  # A Bᵀ: every mode at σ = 1, the teacher's first two in its singular vectors
    np.testing.assert_allclose(np.linalg.svd(P, compute_uv=False), [1.0] * 4, atol=1e-14)
    np.testing.assert_allclose(np.abs(np.diag(U[:, :2].T @ P @ Vt[:2].T)), 1.0, atol=1e-14)


def test_deep_linear_regression_is_whitened_with_the_teacher_as_optimum():
    task = models.deep_linear_regression(m=3, n=4, samples=9, depth=3, singular_values=(2.0, 1.0), seed=1)
    model, W_star = task.model, task.teacher_beta
    assert model.shape == (3, 4) and model.n == 9 and model.X.shape == (9, 4) and model.Y.shape == (9, 3)
    np.testing.assert_allclose(model.X.T @ model.X / 9, np.eye(4), atol=1e-14)  # XᵀX/N = I
    np.testing.assert_allclose(model.Y, model.X @ W_star.T)
    np.testing.assert_allclose(np.linalg.svd(W_star, compute_uv=False), [2.0, 1.0, 0.0], atol=1e-14)
    W = np.random.default_rng(1).standard_normal((3, 4))  # L(W) = ½‖W − W*‖² on the whitened design
    loss, G = _loss_and_gradient(model, W)
    assert loss == pytest.approx(0.5 * np.sum((W - W_star) ** 2), rel=1e-12)
    np.testing.assert_allclose(G, W_star - W, atol=1e-13)
    assert _loss_and_gradient(model, W_star)[0] < 1e-28
    assert [w.shape for w in task.u0] == [(3, 4), (3, 3), (3, 3)]  # Gaussian layers, min(m, n) wide
    assert models.deep_linear_regression(n=4).model.n == 8  # default: 2n samples
    noisy = models.deep_linear_regression(m=3, n=4, samples=9, noise=0.1, seed=1)
    assert np.max(np.abs(noisy.model.Y - model.Y)) > 0 and noisy.config["noise"] == 0.1


@pytest.mark.parametrize("depth", [3, 4])
def test_aligned_stage_times_are_saxes_through_the_greedy_limit(depth):
    """From the aligned start every stage time is Saxe's ``1/((L−2) s_k)``, the largest ``s`` first, and ``W^k`` the
    teacher's ``k`` strongest modes."""
    s = (1.0, 4.0, 2.0)
    task = models.deep_matrix_factorization(m=4, n=3, depth=depth, singular_values=s, seed=5)
    path = gradflow.greedy_limit(task.model, u0=task.u0)
    # to 1e-6: the later stage times are the α-free flow's (docs/deep-linear.md, *The greedy limit*)
    np.testing.assert_allclose(path.times[1:], [1 / ((depth - 2) * x) for x in (4.0, 2.0, 1.0)], rtol=1e-6)
    np.testing.assert_allclose(saxe_times(s, depth), path.times[1:], rtol=1e-6)
    U, sv, Vt = np.linalg.svd(task.teacher_beta)
    for k in range(1, 4):
        np.testing.assert_allclose(path.W[k], (U[:, :k] * sv[:k]) @ Vt[:k], atol=1e-6)
    assert path.result == "successful"


def test_saxe_times_at_two_layers():
    np.testing.assert_allclose(saxe_times((1.0, 2.0), 2), [0.5, 1.0])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: models.deep_matrix_factorization(m=0), "m must be a positive integer"),
        (lambda: models.deep_matrix_factorization(n=2.5), "n must be a positive integer"),
        (lambda: models.deep_matrix_factorization(depth=7), "depth must be one of (2, 3, 4, 5, 6)"),
        (lambda: models.deep_matrix_factorization(m=2, n=3, singular_values=(3, 2, 1)), "min(m, n) = 2"),
        (lambda: models.deep_matrix_factorization(singular_values=(1.0, -1.0)), "singular_values must be 1 to"),
        (lambda: models.deep_matrix_factorization(width=0), "width must be a positive integer"),
        (lambda: models.deep_matrix_factorization(aligned="yes"), "aligned must be true or false"),
        (lambda: models.deep_matrix_factorization(seed=-1), "seed must be a non-negative integer"),
        (lambda: models.deep_linear_regression(n=5, samples=4), "needs samples >= n; got samples=4, n=5"),
        (lambda: models.deep_linear_regression(noise=-0.1), "noise must be a non-negative number"),
        (lambda: models.deep_linear_regression(m=1, singular_values=(2.0, 1.0)), "min(m, n) = 1"),
        (lambda: models.deep_linear_regression_model(np.ones((4, 2)), np.ones(4), depth=3), "Y of shape (N, m)"),
        (lambda: models.deep_matrix_factorization_model(np.ones(3), depth=3), "M must be a matrix"),
    ],
)
def test_bad_arguments_are_refused_with_their_names(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert message in str(err.value)


@pytest.mark.slow
def test_a_sweep_over_deep_linear_tasks(tmp_path):
    """``gradflow sweep`` takes the family's tasks from their declarations: two depths, two scales inside the range."""
    config = tmp_path / "sweep.toml"
    config.write_text(
        "alphas = [0.1, 0.01]\nnum_times = 60\n"
        "[[model]]\nname = 'deep_matrix_factorization'\nm = 2\nn = 2\nsingular_values = [2.0, 1.0]\ndepth = [3, 4]\n"
    )
    assert main(["sweep", str(config), "--out", str(tmp_path / "out"), "--format", "csv", "--no-progress"]) == 0
    with open(tmp_path / "out" / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["model"], r["depth"], r["error"]) for r in rows} == {("deep_matrix_factorization", d, "") for d in "34"}
    stage_1 = [r for r in rows if r["stage"] == "1"]  # T_1 = 1/((L − 2) s_1), detected on each flow near it
    assert len(stage_1) == 4 and all(
        float(r["T_greedy"]) == pytest.approx(0.5 / (int(r["depth"]) - 2)) for r in stage_1
    )
    assert all(abs(float(r["T_detected"]) - float(r["T_greedy"])) < 0.1 for r in stage_1)

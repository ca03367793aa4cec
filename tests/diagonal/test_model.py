"""DiagonalModel and the built-in tasks: shapes, validation, g = −∇_β L, and the teacher's loss."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradflow._data
from gradflow import DiagonalModel, evaluate_g, evaluate_loss, models
from gradflow._data import loss_at_each, sample_blocks
from gradflow._diagonal._attention import _attention_gradient

TASKS = {
    "linear": lambda: models.diagonal_linear(n=30, p=6, nonzero=3, seed=3),
    "linear_orthonormal": lambda: models.diagonal_linear(n=30, p=6, orthonormal=True, seed=3),
    "attention": lambda: models.diagonal_attention(n=20, tokens=4, dim=3, seed=3),
    "transformer": lambda: models.diagonal_transformer(n=10, tokens=3, dim=2, layers=2, heads=2, mlp=4, seed=3),
}


@pytest.fixture(scope="module", params=sorted(TASKS))
def task(request):
    return TASKS[request.param]()


def test_task_shapes(task):
    m = task.model
    assert isinstance(m, DiagonalModel)
    assert task.u0.shape == task.v0.shape == task.teacher_beta.shape == (m.p,)
    assert len(m.names) == m.p and m.X.dtype == np.float64 and m.X.shape[0] == m.Y.shape[0] == m.n


def test_sizes_follow_the_architecture():
    """p = 2d for the head (β = [β_KQ, β_VO]) and 2·L·H·d for the transformer (docs/math.md, Example 3.2)."""
    assert models.diagonal_attention(n=5, tokens=3, dim=7).model.p == 2 * 7
    assert models.diagonal_transformer(n=4, dim=2, layers=3, heads=2).model.p == 2 * 3 * 2 * 2


def test_loss_at_teacher_is_zero(task):
    assert evaluate_loss(task.model, task.teacher_beta) < 1e-20
    assert evaluate_loss(task.model, np.zeros(task.model.p)) > 1e-3


def test_g_against_finite_differences(task):
    """g = −∇_β L (the sign convention of docs/math.md), checked by central differences in float64."""
    m = task.model
    beta = 0.3 * np.random.default_rng(0).standard_normal(m.p)
    h = 1e-6
    eye = np.eye(m.p)
    fd = -(evaluate_loss(m, beta + h * eye) - evaluate_loss(m, beta - h * eye)) / (2 * h)
    g = evaluate_g(m, beta)
    assert g.dtype == np.float64 and g.shape == (m.p,)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8 * (1 + np.abs(g).max()))


@given(st.integers(1, 5000))
def test_sample_blocks_partition_the_samples(n):
    """Contiguous blocks covering 0 … n−1 once, of at least 256 samples each (or one block), at most four."""
    blocks = sample_blocks(n)
    assert 1 <= len(blocks) <= 4 and blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(b == a for (_, b), (a, _) in zip(blocks, blocks[1:]))
    sizes = [b - a for a, b in blocks]
    assert max(sizes) - min(sizes) <= 1 and (len(blocks) == 1 or min(sizes) >= 256)
    assert len(blocks) == min(4, max(1, n // 256))


def test_blocked_sums_equal_one_pass():
    """With n = 700 (two blocks of samples) the loss and both g's equal the one-pass sums to rounding."""
    task = models.diagonal_attention(n=700, tokens=4, dim=5, seed=1)
    m = task.model
    assert len(sample_blocks(m.n)) == 2
    generic = DiagonalModel(m.h, m.X, m.Y, p=m.p, loss=m.loss)
    g, loss_of_beta = (
        eqx.filter_jit(lambda model, beta: model.g(beta)),
        eqx.filter_jit(lambda beta: m.loss_of_beta(beta)),
    )
    with jax.enable_x64(True):  # each sum compiled, as the solvers call it (not dispatched operation by operation)
        beta = jnp.asarray(0.7 * np.random.default_rng(3).standard_normal(m.p))
        X, Y = jnp.asarray(m.X), jnp.asarray(m.Y)
        one_pass = jax.jit(_attention_gradient)(X, Y, beta) / -m.n
        loss = jax.jit(
            lambda X, Y, beta: jnp.mean(jnp.sum((jax.vmap(lambda x: m.h(x, beta))(X) - Y) ** 2, axis=(1, 2)) / 2)
        )
        loss = loss(X, Y, beta)
        scale = float(jnp.abs(one_pass).max())
        np.testing.assert_allclose(g(m, beta), one_pass, rtol=0, atol=1e-14 * scale)
        np.testing.assert_allclose(g(generic, beta), one_pass, rtol=0, atol=1e-13 * scale)
        np.testing.assert_allclose(loss_of_beta(beta), loss, rtol=1e-14)


@pytest.mark.parametrize("count", [0, 1, 7, 50])
def test_loss_at_each_equals_one_vmap(count, monkeypatch):
    """The losses of a stack of states in blocks (here of 3, the last one partial) are one ``vmap``'s, in order."""
    m = models.diagonal_linear(n=30, p=6, nonzero=3, seed=3).model
    monkeypatch.setattr(gradflow._data, "_STACK_NUMBERS", 3 * np.size(m.X))
    with jax.enable_x64(True):
        betas = jnp.asarray(np.random.default_rng(count).standard_normal((count, m.p)))
        blocked = jax.jit(lambda b: loss_at_each(m.loss_of_beta, b, m.X))(betas)
        assert blocked.shape == (count,)
        np.testing.assert_allclose(blocked, jax.vmap(m.loss_of_beta)(betas), rtol=1e-15)


def test_batched_evaluation_and_float64_without_global_x64():
    task = TASKS["linear"]()
    betas = np.random.default_rng(1).standard_normal((2, 3, 6))
    assert not jax.config.jax_enable_x64
    loss, g = evaluate_loss(task.model, betas), evaluate_g(task.model, betas)
    assert loss.shape == (2, 3) and g.shape == (2, 3, 6) and loss.dtype == g.dtype == np.float64
    np.testing.assert_allclose(g[1, 2], evaluate_g(task.model, betas[1, 2]))
    assert not jax.config.jax_enable_x64  # the scope was restored


def test_map_per_core_keeps_order_and_runs_each_call_in_float64():
    """The threads of ``map_per_core`` do not inherit the caller's x64 scope: each call enters its own."""
    from gradflow._config import cores_for, map_per_core

    assert not jax.config.jax_enable_x64 and cores_for(0) == 1 and cores_for(10**6) >= 1
    out = map_per_core(lambda k: (k, jnp.asarray(0.5).dtype), range(7))
    assert out == [(k, jnp.float64) for k in range(7)]
    assert not jax.config.jax_enable_x64


def test_loss_value_and_minibatch():
    m = TASKS["linear"]().model
    u, v = np.linspace(0.1, 1, 6), np.linspace(-1, 1, 6)
    with jax.enable_x64(True):
        full = float(m.loss_value(jnp.asarray(u), jnp.asarray(v)))
        part = float(m.loss_of_beta(jnp.asarray(u * v), batch=jnp.arange(5)))
    r = m.Y - m.X @ (u * v)
    np.testing.assert_allclose(full, 0.5 * np.mean(r**2), rtol=1e-13)
    np.testing.assert_allclose(part, 0.5 * np.mean(r[:5] ** 2), rtol=1e-13)


def _linear_h(x, beta):
    return jnp.dot(x, beta)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((_linear_h, np.ones((3, 2)), np.ones(4)), dict(p=2), ValueError, "same number of samples"),
        ((_linear_h, np.ones((0, 2)), np.ones(0)), dict(p=2), ValueError, "empty"),
        ((_linear_h, np.array([[1.0, np.nan]]), np.ones(1)), dict(p=2), ValueError, "X must be numeric and finite"),
        ((_linear_h, np.ones((2, 2)), np.array([1.0, np.inf])), dict(p=2), ValueError, "Y must be numeric and finite"),
        ((_linear_h, np.ones((2, 2)), np.ones(2)), dict(p=0), ValueError, "p must be a positive integer"),
        ((_linear_h, np.ones((2, 2)), np.ones(2)), dict(p=2, loss="hinge"), ValueError, "loss must be one of"),
        ((_linear_h, np.ones((2, 2)), np.ones((2, 3))), dict(p=2), ValueError, r"returns shape \(\) but each target"),
        ((_linear_h, np.ones((2, 2)), np.ones(2)), dict(p=3), ValueError, "h\\(x, beta\\) failed"),
        ((_linear_h, np.ones((2, 2)), np.ones(2)), dict(p=2, names=("a",)), ValueError, "one label per coordinate"),
        (("not callable", np.ones((2, 2)), np.ones(2)), dict(p=2), TypeError, "h must be a function"),
        (
            (lambda x, b: x * b, np.ones((2, 2)), np.array([0, 2])),
            dict(p=2, loss="cross_entropy"),
            ValueError,
            r"labels must lie in \[0, 2\)",
        ),
    ],
)
def test_model_validation(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        DiagonalModel(*args, **kwargs)


def test_vector_validation():
    m = TASKS["linear"]().model
    with pytest.raises(ValueError, match=r"beta must have shape \(\.\.\., 6\)"):
        evaluate_g(m, np.ones(5))
    with pytest.raises(ValueError, match=r"beta contains NaN or inf at index \[2\]"):
        evaluate_loss(m, np.r_[0.0, 0.0, np.nan, 0, 0, 0])


def test_builtin_task_validation():
    with pytest.raises(ValueError, match="orthonormal design needs n >= p"):
        models.diagonal_linear(n=3, p=5, orthonormal=True)
    with pytest.raises(ValueError, match=r"beta_star must have shape \(4,\)"):
        models.diagonal_linear(n=10, p=4, beta_star=np.ones(3))
    with pytest.raises(ValueError, match="n must be a positive integer"):
        models.diagonal_attention(n=0)
    with pytest.raises(ValueError, match="nonzero entries must lie in"):
        models.diagonal_attention(n=5, dim=3, teacher_nonzero=(4, 1))


def test_tasks_are_seeded():
    a, b, c = (models.diagonal_attention(n=8, tokens=3, dim=4, seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.model.X, b.model.X)
    np.testing.assert_array_equal(a.u0, b.u0)
    assert not np.array_equal(a.model.X, c.model.X)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_rebuilt_models_share_one_compilation(name):
    """Two models built from the same configuration hit the same jit cache entry (h is not a fresh closure)."""
    traces = []

    @eqx.filter_jit
    def g(model, beta):
        traces.append(1)
        return model.g(beta)

    with jax.enable_x64(True):
        for _ in range(2):
            model = TASKS[name]().model
            g(model, jnp.zeros(model.p))
    assert len(traces) == 1

"""The optimiser step of the training loop: the mean loss and gradient over micro-batches, the update, and the log
of its losses, fetched at sync points, that stops a run at a non-finite loss."""

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradflow.nets._distributed import make_layout
from gradflow.nets._step import NonFiniteLossError, StepLog, all_finite, make_step, non_finite, split_model

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


class _Line(eqx.Module):
    w: jnp.ndarray
    frozen: jnp.ndarray
    name: str = eqx.field(static=True, default="line")


def _loss(model, arrays, idx):
    """Mean of ``(x·w + frozen − y)²`` over the examples ``idx``."""
    x, y = arrays
    return jnp.mean((x[idx] @ model.w + model.frozen[0] - y[idx]) ** 2)


def test_a_step_takes_the_mean_over_micro_batches_and_trains_only_the_chosen_arrays():
    """SGD (no transformation): ``w ← w − lr · ḡ``, with ``ḡ`` and the loss the means over two micro-batches of
    two examples; ``frozen`` (not trainable) is used but not trained. Checked against the formulas in NumPy."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]], np.float32)
    y = np.array([1.0, -1.0, 0.5, 2.0], np.float32)
    model = _Line(jnp.array([0.5, -0.25]), jnp.array([0.1]))
    params, frozen, static = split_model(model, _Line(True, False, "line"))
    assert params.frozen is None and frozen.w is None and static.name == "line"
    traces = [0]
    step = make_step(optax.identity(), _loss, traces)
    idx = np.array([[0, 1], [2, 3]])
    new, _, loss, norm = step(params, None, frozen, static, make_layout(1), (x, y), idx, 0.1)
    r = x @ np.array([0.5, -0.25]) + 0.1 - y
    grads = [2 * x[i].T @ r[i] / 2 for i in idx]
    mean = np.mean(grads, axis=0)
    np.testing.assert_allclose(loss, np.mean([np.mean(r[i] ** 2) for i in idx]), rtol=1e-6)
    np.testing.assert_allclose(norm, np.linalg.norm(mean), rtol=1e-6)
    np.testing.assert_allclose(new.w, np.array([0.5, -0.25]) - 0.1 * mean, rtol=1e-6)
    assert traces == [1]


def test_the_log_fetches_at_sync_points_and_stops_at_a_non_finite_loss():
    """The queued losses come back as floats at ``sync``; a NaN names its step and the learning rate of that step
    (the schedule at ``step − 1``: the updates already done)."""
    log = StepLog(lambda step: 0.01 * step)
    log.add(1, jnp.float32(2.0), jnp.float32(3.0))
    log.add(2, jnp.float32(1.5), jnp.float32(2.5))
    assert log.sync() == [(1, 2.0, 3.0), (2, 1.5, 2.5)] and log.sync() == []
    seconds, steps = log.take_timing()
    assert steps == 2 and seconds >= 0 and log.take_timing() == (0.0, 0)
    log.add(3, jnp.float32(1.0), jnp.float32(1.0))
    log.add(4, jnp.float32(math.nan), jnp.float32(1.0))
    with pytest.raises(NonFiniteLossError, match=r"^loss is nan at step 4 \(learning rate 0.03\); stopped, the rec"):
        log.sync(timed=False)
    assert log.take_timing() == (0.0, 0)  # untimed


def test_non_finite_says_what_to_try_and_all_finite_checks_every_leaf():
    assert str(non_finite("the gradient after step 3")).startswith("the gradient after step 3; stopped, the records")
    assert "Try a lower learning rate (lr, --lr) or gradient clipping" in str(non_finite("x", 0.5))
    assert bool(all_finite({"a": jnp.ones(3), "b": [jnp.zeros((2, 2))]}))
    assert not bool(all_finite({"a": jnp.ones(3), "b": [jnp.array([[0.0, jnp.inf]])]}))

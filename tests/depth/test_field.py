"""The depth family's vector field (gradflow/_depth/_field.py, docs/depth.md *The exact flow*): in each coordinate's
variable (a clock, the smallest layer over α near zero, ``log a`` awake) it is gradient flow on the layers,
``dw_l/dt = g ⊙ Π_{k≠l} w_k``, checked through the layers that the state stands for (nothing compiled)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._depth._field import AWAKE, CLOCK, JUMP, NEAR, PLATEAU, Args, beta_of, vector_field
from gradflow._depth._flow import initial_state, layers_of, reduce_start, wake_scale

LOG_ALPHA = np.log(1e-4)
W0 = np.array(  # columns: awake (α|w| above a_wake), a balanced clock, near zero (unbalanced), an unbalanced clock
    [[3.0, 1.0, 0.1, 1.0], [3.0, 1.0, 1.0, -1.01], [-3.0, 1.0, -1.0, 1.02]]
)


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def model():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 4))
    return gradflow.DepthModel(lambda x, b: x @ b, X, X @ np.array([1.0, -2.0, 0.5, 1.5]), p=4, depth=3)


def layers(red, z, kind, sigma_r):
    log_w, sign = layers_of(red, 3, LOG_ALPHA, z[None], kind[None], sigma_r[None])
    return (sign * np.exp(log_w))[0]


def test_the_field_is_gradient_flow_on_the_layers():
    red = reduce_start(W0)
    log_wake = wake_scale(3, 1e-8)
    z, kind, sigma_r = initial_state(red, LOG_ALPHA, 3, log_wake)
    assert kind.tolist() == [AWAKE, CLOCK, NEAR, CLOCK]
    w = layers(red, z, kind, sigma_r)
    np.testing.assert_allclose(w, np.exp(LOG_ALPHA) * W0, rtol=1e-12)

    def args(mode):
        return Args(
            model=model(),
            kind=jnp.asarray(kind),
            sigma_r=jnp.asarray(sigma_r),
            sigma_o=jnp.asarray(red.sigma_o),
            C=jnp.asarray(red.C),
            log_alpha=jnp.asarray(LOG_ALPHA),
            mode=jnp.asarray(mode),
            settled=jnp.asarray(1e-10),
            log_wake=jnp.asarray(log_wake),
        )

    field = eqx.filter_jit(vector_field)  # one compilation, not one per operation
    beta = np.asarray(eqx.filter_jit(beta_of)(jnp.asarray(z), args(JUMP)))
    np.testing.assert_allclose(beta, np.prod(w, axis=0), rtol=1e-12)
    g = np.asarray(args(JUMP).model.g(beta))
    velocity = g * np.prod(w, axis=0) / w  # dw_l/dt = g Π_{k≠l} w_k
    dz_dt = np.asarray(field(0.0, jnp.asarray(z), args(JUMP)))  # a jump's variable is t
    h = 0.1
    moved = (layers(red, z + h * dz_dt, kind, sigma_r) - layers(red, z - h * dz_dt, kind, sigma_r)) / (2 * h)
    np.testing.assert_allclose(moved, velocity, rtol=1e-6)
    dz_dtau = np.asarray(field(0.0, jnp.asarray(z), args(PLATEAU)))  # a plateau's is τ = ε t, ε = α^{L−2}
    np.testing.assert_allclose(dz_dtau, dz_dt / np.exp(LOG_ALPHA), rtol=1e-12)

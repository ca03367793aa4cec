"""The exact gradient flow of a deep linear network from ``W_l(0) = α W0_l`` (docs/deep-linear.md, *The exact flow*).

With the layers in units of α, ``Ŵ_l = W_l / α`` (of order 1 while asleep), the end-to-end matrix is
``W = α^L Ŵ_L ⋯ Ŵ_1`` and the flow ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` reads

    dŴ_l/dτ = κ Ŵ_{>l}ᵀ G(W) Ŵ_{<l}ᵀ,   κ = 1 in τ = t α^{L−2} (L ≥ 3),   κ = log(1/α) in τ = t / log(1/α) (L = 2),

whose plateaus last a time of order 1 in τ. Learned modes relax at rate ``O(α^{−(L−2)})`` in τ (stiff), so it is
solved by Kvaerno5 (L-stable) in segments (``gradflow._solver``), stepping onto every output time, with Newton's
equations solved matrix-free above :data:`MATRIX_FREE_ABOVE` layer entries (any size), in the range of
α that ``_checks.lowest_log_alpha`` states. Below ``_checks.small_log_alpha`` (``L ≥ 3``) the flow is its α → 0
limit to the tolerance, computed by ``gradflow._deep_linear._small``; between the two, by the split of the layers
into their learned and sleeping parts (``gradflow._deep_linear._split``, also matrix-free above
:data:`MATRIX_FREE_ABOVE` entries) down to ``_checks.SPLIT_LOWEST``.
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._kit._checks import EPS
from .._kit._family import FlowRequest
from .._solver import Solve, solve_in_segments, solve_runs, solve_status, stiff_solve, vmap_batches
from . import _small, _split
from ._checks import check_resolved, check_size, lowest_log_alpha, small_log_alpha
from ._model import DeepLinearModel, check_layers, layer_velocities, product
from ._options import DeepLinearSolver
from ._results import DeepLinearFlowResult
from ._split_fields import outputs_are_linear, split_form

_ADVICE = "Try a looser atol, or a larger max_steps."


class Args(eqx.Module):
    model: DeepLinearModel
    log_alpha: jax.Array

    @property
    def kappa(self):
        """``dτ`` per ``dt`` over ``α^{L−2}``: 1 for ``L ≥ 3``, ``log(1/α)`` for ``L = 2``."""
        return -self.log_alpha if self.model.depth == 2 else jnp.ones_like(self.log_alpha)


def end_to_end(layers, log_alpha, depth: int):
    """``W = α^L Ŵ_L ⋯ Ŵ_1`` of the layers in units of α."""
    return jnp.exp(depth * log_alpha) * product(layers)


def vector_field(tau, layers, args: Args):
    """``dŴ_l/dτ = κ Ŵ_{>l}ᵀ G(W) Ŵ_{<l}ᵀ``."""
    G = args.model.G(end_to_end(layers, args.log_alpha, args.model.depth))
    return tuple(args.kappa * v for v in layer_velocities(layers, G))


MATRIX_FREE_ABOVE = 256
"""``DeepLinearSolver(newton="auto")`` solves Newton's equations matrix-free, by GMRES on Jacobian-vector products
(``O(N)`` memory and ``O(N)`` work per product), above this many layer entries, and by LU of the dense Jacobian
(``N²`` memory, ``N³`` work) up to it, on the direct integration and on the split of the layers (by Kvaerno5 instead
of Radau): the two cost the same from 27 to 100 entries (matrix-free compiles longer), and matrix-free is 5 to 7 times
faster on the direct integration and 1.5 times on the split from 300 (10 × 10) (docs/benchmarks.md, *Deep linear:
the direct integration against the layers' size* and *Deep linear: the split against the layers' size*)."""


def matrix_free(model: DeepLinearModel, solver: DeepLinearSolver) -> bool:
    """Whether Newton's equations are solved matrix-free (``solver.newton``; ``"auto"``: above
    :data:`MATRIX_FREE_ABOVE` entries)."""
    if solver.newton == "auto":
        return sum(a * b for a, b in model.layer_shapes) > MATRIX_FREE_ABOVE
    return solver.newton == "matrix_free"


def _solve_of(model, log_alpha, ts, rtol, atol, free) -> Solve:
    # Newton at every iterate, not a chord: the Jacobian changes fast along a jump; stopped on the stage's state, since
    # a stop on its velocity failed every step of a settled flow once α^{L−2} ≲ 1e-6 (the old stiffness bound).
    args = Args(model=model, log_alpha=log_alpha)
    return stiff_solve(vector_field, args, ts, rtol=rtol, atol=atol, matrix_free=free)


@eqx.filter_jit
def _start(model, y0, log_alpha, ts, rtol, atol, *, batched, free):
    def one(la):
        return _solve_of(model, la, ts, rtol, atol, free).start(y0)

    return jax.vmap(one)(log_alpha) if batched else one(log_alpha)


@eqx.filter_jit
def _advance(model, seg, budget, log_alpha, ts, rtol, atol, *, batched, free):
    def one(seg, budget, la):
        return _solve_of(model, la, ts, rtol, atol, free).advance(seg, budget)

    return jax.vmap(one)(seg, budget, log_alpha) if batched else one(seg, budget, log_alpha)


@eqx.filter_jit
def _outputs(model, ys, log_alpha, *, batched):
    """The layers ``W_l = α Ŵ_l``, ``W``, the logs of ``W``'s singular values and the loss at the recorded ``ys``."""

    def at(layers, la):
        P = product(layers)
        W = jnp.exp(model.depth * la) * P
        log_sv = model.depth * la + jnp.log(graded_singular_values(layers, la)[: model.rank])
        return tuple(jnp.exp(la) * w for w in layers), W, log_sv, model.loss_of_weights(W)

    def one(ys, la):
        return jax.vmap(lambda layers: at(layers, la))(ys)

    return jax.vmap(one)(ys, log_alpha) if batched else one(ys, log_alpha)


def graded_singular_values(layers, log_alpha):
    """The singular values of ``Ŵ_L ⋯ Ŵ_1``, descending, each to the accuracy the layers hold it.

    An SVD of the product holds ``σ_i`` to ``eps σ_1``: after a jump the sleeping modes (``σ_i`` of order 1 beside
    learned ones of order ``α^{−L}``) drown in it. Where that error exceeds ``α σ_i`` (``σ_i < σ_1 eps/α``), ``σ_i`` is
    read instead from the product of the layers projected off the subspaces the ``k`` modes above carry (``k`` those
    with ``σ_i ≥ σ_1 eps/α``): the input's and output's from the SVD, each hidden space's the image of the input's
    under the layers below. That product holds the sleeping modes to ``eps/α``, the layers' own resolution of a
    sleeping entry beside a learned one, where the blocks of the sleeping layers that meet a learned subspace vanish
    (on a plateau they are of relative order α; docs/deep-linear.md, *Small α*). Where the product's SVD resolves
    them too (Gaussian starts on the whitened 3×3 task, α = 1e-2, 1e-3, L = 2, 3, 4), the two agree to 2e-10."""
    _, sv, Vt = jnp.linalg.svd(product(layers))
    count = jnp.sum(sv >= sv[0] * EPS * jnp.exp(-log_alpha))  # the modes the product's SVD holds to α σ_i
    index = jnp.arange(sv.size)
    frame = Vt.T[:, : sv.size] * (index < count)  # the input's learned subspace (zero columns beyond `count`)
    projected, image = [], frame
    for w in layers:
        image = w @ image
        Q = jnp.linalg.svd(image, full_matrices=False)[0]
        Q = Q * (jnp.arange(Q.shape[1]) < count)  # the space's learned subspace
        off = w - Q @ (Q.T @ w)
        projected.append(off - (off @ frame) @ frame.T)
        frame = Q
    rest = jnp.linalg.svd(product(projected), compute_uv=False)  # the sleeping modes first, then zeros
    return jnp.where(index < count, sv, rest[jnp.clip(index - count, 0, sv.size - 1)])


def _run(model, y0, log_alpha, ts, rtol, atol, *, batched, free, max_steps, progress):
    """The flow of one run or a ``vmap``-ed batch, solved in segments (Newton matrix-free where ``free``): the outputs
    and whether Ctrl-C stopped each."""
    seg, result, stopped = solve_in_segments(
        lambda seg, budget: _advance(model, seg, budget, log_alpha, ts, rtol, atol, batched=batched, free=free),
        _start(model, y0, log_alpha, ts, rtol, atol, batched=batched, free=free),
        ts[-1],
        max_steps=max_steps,
        progress=progress,
    )
    return (_outputs(model, seg.ys, log_alpha, batched=batched), result, seg.stats), stopped


def flow(model: DeepLinearModel, request: FlowRequest, solver: DeepLinearSolver) -> DeepLinearFlowResult:
    """``simulate_flow`` for a deep linear network once the checks every family shares are done: the exact flow from
    ``W_l(0) = α u0[l−1]`` (the module's equation), one run or a batch of scales."""
    if request.start is not None:
        raise ValueError("a DeepLinearModel's flow starts from u0 (the layers' directions); start is not taken.")
    if request.v0 is not None:
        raise ValueError(
            "a DeepLinearModel takes its layers' directions as u0, a tuple of L matrices; v0 is not taken."
        )
    if request.u0 is None:
        raise ValueError("give the layers' initial directions u0, a tuple of L matrices (W_l(0) = α u0[l−1]).")
    W0 = check_layers(model, request.u0)
    ts, log_a, rtol, atol, max_steps = request.ts, request.log_a, request.rtol, request.atol, request.max_steps
    deep = model.depth >= 3
    small = (np.asarray(log_a) <= small_log_alpha(rtol, atol)) & deep
    split = (np.asarray(log_a) < lowest_log_alpha(model.depth, float(np.max(ts)), rtol, atol)) & ~small & deep
    check_resolved(model.depth, log_a, ts, rtol=rtol, atol=atol, linear=not np.any(split) or outputs_are_linear(model))
    free = matrix_free(model, solver)
    form = split_form(model, free=free) if np.any(split) else None
    if form is not None:
        check_size(model, log_a, split, free=free, coefficients=form.bytes, rtol=rtol, atol=atol)
    options = dict(rtol=rtol, atol=atol, max_steps=max_steps, progress=request.progress)
    split_flow = functools.partial(_split.flow, free=free, form=form)
    if np.all(small):
        return _small.flow(model, W0, ts, log_a, **options)
    if np.all(split):
        return split_flow(model, W0, ts, log_a, **options)
    if np.any(small | split):  # a batch across the ranges: each part by its own path, merged in the batch's order
        la = np.asarray(log_a)
        direct = ~(small | split)
        parts = [(small, _small.flow), (split, split_flow)]
        results = [(mask, path(model, W0, ts, la[mask], **options)) for mask, path in parts if np.any(mask)]
        if np.any(direct):
            results.append((direct, flow(model, dataclasses.replace(request, log_a=la[direct]), solver)))
        return _merged(results)
    y0 = tuple(jnp.asarray(w) for w in W0)
    la, times = jnp.asarray(log_a), jnp.asarray(ts)

    def run(j, progress):
        batched = request.batched and j is None
        return _run(
            model,
            y0,
            la if j is None else la[j],
            times,
            rtol,
            atol,
            batched=batched,
            free=free,
            max_steps=max_steps,
            progress=progress,
        )

    separately = not vmap_batches(request.batching)
    # the solver's time is τ itself: the progress bar's scale, log(1/α) for the other families, is 1 here
    unit = -np.ones(np.shape(np.atleast_1d(log_a)))
    out, stopped = solve_runs(
        run, unit, ts[-1], batched=request.batched, separately=separately, progress=request.progress
    )
    (layers, W, log_sv, loss), solver_result, stats = jax.tree_util.tree_map(np.asarray, out)
    result, message = solve_status(
        solver_result,
        np.isfinite(loss),
        ts,
        log_a,
        max_steps,
        stopped,
        what="simulate_flow (deep linear network)",
        advice=_ADVICE,
    )
    return DeepLinearFlowResult(
        ts=ts,
        layers=layers,
        W=W,
        log_singular_values=log_sv,
        loss=np.where(np.isfinite(loss), loss, np.nan),
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=stats[..., 0],
            num_accepted_steps=stats[..., 1],
            num_rejected_steps=stats[..., 2],
            max_steps=max_steps,
        ),
        result=result,
        message=message,
    )


def _merged(parts) -> DeepLinearFlowResult:
    """One batch from the runs of several paths, ``parts`` the pairs ``(mask, result)`` (``mask`` marks a path's places
    in the batch): every field in the batch's order; a count that one path does not keep is −1 in its runs."""
    size = parts[0][0].size

    def merge(field):
        values = [field(result) for _, result in parts]
        out = np.empty((size, *np.shape(values[0])[1:]), dtype=np.result_type(*values))
        for (mask, _), value in zip(parts, values):
            out[mask] = value
        return out

    keys = set().union(*(result.stats.keys() for _, result in parts)) - {"max_steps"}
    stats = {"max_steps": parts[0][1].stats["max_steps"]}
    for key in sorted(keys):
        stats[key] = merge(lambda r: r.stats.get(key, np.full(np.size(r.log_alpha), -1)))
    first = parts[0][1]
    return DeepLinearFlowResult(
        ts=first.ts,
        layers=tuple(merge(lambda r: r.layers[l]) for l in range(len(first.layers))),
        W=merge(lambda r: r.W),
        log_singular_values=merge(lambda r: r.log_singular_values),
        loss=merge(lambda r: r.loss),
        log_alpha=merge(lambda r: r.log_alpha),
        stats=stats,
        result=merge(lambda r: r.result),
        message=merge(lambda r: r.message),
    )

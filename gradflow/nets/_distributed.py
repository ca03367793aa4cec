"""Where a training run's arrays live: a one-axis mesh of devices (``"data"``) over which every batch is split
(data parallelism), with the parameters and optimiser state either replicated on every device (DDP) or sharded
FSDP-style (each large array split along one axis; XLA gathers it where the step needs it whole).

One process drives all its local devices; with ``jax.distributed.initialize()`` several processes (hosts, or one
per GPU) form one mesh over all their devices, each feeding its own devices' part of every batch. Checkpoints hold
whole host arrays, so that a run resumes on any number of devices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA = "data"
SHARDINGS = ("replicated", "fsdp")
FSDP_MIN_SIZE = 2**12
"""Arrays with fewer entries stay replicated under FSDP: gathering them costs more than storing them."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mesh of devices with the axis ``"data"`` and how parameters are placed on it (hashable: a static argument
    of the jitted step).

    - the batch (index arrays, last axis: the examples of a micro-batch) is split evenly over ``"data"``;
    - ``sharding="replicated"``: every parameter and optimiser-state array on every device (DDP; XLA all-reduces
      the gradients);
    - ``sharding="fsdp"``: an array with at least ``FSDP_MIN_SIZE`` entries is split over ``"data"`` along its
      longest axis whose length the device count divides (not the leading, layer, axis of the stacked blocks,
      which the layer scan slices; last such axis on ties); Adam's moments follow their parameter.
    """

    mesh: Mesh
    sharding: Literal["replicated", "fsdp"] = "replicated"

    @property
    def n_devices(self) -> int:
        return self.mesh.devices.size

    def spec(self, shape: tuple[int, ...]) -> PartitionSpec:
        """The partition of an array of ``shape`` (parameters, optimiser state and frozen weights alike)."""
        n = self.n_devices
        if self.sharding == "replicated" or n == 1 or math.prod(shape) < FSDP_MIN_SIZE:
            return PartitionSpec()
        axes = [a for a in range(1 if len(shape) >= 3 else 0, len(shape)) if shape[a] % n == 0]
        if not axes:
            return PartitionSpec()
        axis = max(axes, key=lambda a: (shape[a], a))
        return PartitionSpec(*(DATA if a == axis else None for a in range(len(shape))))

    def named(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    def place(self, tree):
        """``tree`` with its array leaves on the mesh as :meth:`spec` says (host arrays are sent, device arrays
        resharded; an array already placed so is kept as it is)."""
        return jax.tree_util.tree_map(lambda a: self._put(a, self.named(self.spec(a.shape))), tree, is_leaf=_is_array)

    def replicate(self, tree):
        """``tree`` with every array leaf whole on every device (the data sets)."""
        return jax.tree_util.tree_map(lambda a: self._put(a, self.named(PartitionSpec())), tree, is_leaf=_is_array)

    def batch(self, idx: np.ndarray) -> jax.Array:
        """The index array ``idx`` (the same in every process) with its last axis split over ``"data"``: each process
        sends only its own devices' part."""
        if idx.shape[-1] % self.n_devices:
            raise ValueError(
                f"a batch of {idx.shape[-1]} examples does not split evenly over {self.n_devices} devices: choose a "
                f"batch size (and micro_batch) that is a multiple of {self.n_devices}, or fewer devices"
            )
        spec = PartitionSpec(*([None] * (idx.ndim - 1)), DATA)
        return jax.make_array_from_callback(idx.shape, self.named(spec), lambda index: idx[index])

    def constrain(self, tree):
        """Inside a jitted function: the array leaves of ``tree`` laid out as :meth:`place` does (nothing on one
        device, so that the one-device program is the plain one)."""
        if self.n_devices == 1:
            return tree
        return jax.tree_util.tree_map(
            lambda a: jax.lax.with_sharding_constraint(a, self.named(self.spec(a.shape))), tree, is_leaf=_is_array
        )

    def eval_batch(self, size: int) -> int:
        """``size`` rounded up to a multiple of the device count (evaluation pads and masks the last batch)."""
        return -(-size // self.n_devices) * self.n_devices

    @staticmethod
    def _put(a, sharding: NamedSharding):
        if isinstance(a, np.ndarray) or (isinstance(a, np.generic)):
            a = np.asarray(a)
            return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])
        if a.sharding == sharding:
            return a
        if a.is_fully_addressable and not sharding.is_fully_addressable:  # a local array into a multi-process mesh
            return Layout._put(np.asarray(a), sharding)
        return jax.device_put(a, sharding)


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def make_layout(devices: int | Sequence[jax.Device] | None = None, sharding: str = "replicated") -> Layout:
    """The layout of a run on ``devices``: None, every device of every process (``jax.devices()``); an int ``n``,
    the first ``n`` (one process only); or the devices themselves."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    available = jax.devices()
    if devices is None:
        devices = available
    elif isinstance(devices, int):
        if not 1 <= devices <= len(available):
            raise ValueError(f"devices={devices}, but {len(available)} device(s) are available: {available}")
        if jax.process_count() > 1 and devices != len(available):
            raise ValueError(
                f"devices={devices}: a run of {jax.process_count()} processes uses all their {len(available)} devices"
            )
        devices = available[:devices]
    return Layout(Mesh(np.array(list(devices)), (DATA,)), sharding)


def to_host(tree):
    """The array leaves of ``tree`` as whole NumPy arrays in every process (gathered across processes where no
    process holds the whole array: then every process must call this, as the training loop does)."""

    def get(a):
        if not isinstance(a, jax.Array):
            return a
        if a.is_fully_addressable or a.is_fully_replicated:
            return np.asarray(a)
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))

    return jax.tree_util.tree_map(get, tree, is_leaf=eqx.is_array)


def is_writer() -> bool:
    """Whether this process writes the run folder (process 0 of a multi-process run; the only process otherwise)."""
    return jax.process_index() == 0

"""Data sets for the ViT and GPT experiments, and deterministic resumable batches.

Images are returned as ``uint8`` arrays of shape ``(N, H, W, C)`` with ``int32`` labels; text as a
1-D array of token ids (see :mod:`gradflow.nets._tokenizer`). Nothing is downloaded: the user names
a folder in one of the standard layouts, or gets the embedded default data that ships with an
installed package:

- images: scikit-learn's ``load_digits`` (1,797 grey 8×8 images of the digits 0–9, pixel values
  0..16 rescaled to 0..255). They are kept at 8×8 with one channel (use patch size 2 for a ViT), or
  upsampled by pixel repetition to ``image_size`` (a multiple of 8). A seeded permutation puts 20 %
  of them in the test split.
- text: the dataset descriptions shipped with scikit-learn (``sklearn/datasets/descr/*.rst``, by
  file name) followed by the Python language-reference help topics of the standard library
  (``pydoc_data.topics.topics``, by key) — about 0.5 MB of real English prose. Each document ends
  with ``<|endoftext|>``; the token stream is split 90/5/5 % into train/valid/test by position.
  It is deterministic for a given scikit-learn and Python version.

Loading a pickle runs code chosen by its author; the CIFAR readers use an unpickler that only
accepts the Python and NumPy types the official files contain.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ._tokenizer import BYTE_TOKENIZER, ByteTokenizer

__all__ = [
    "ImageDataset",
    "TextDataset",
    "load_images",
    "load_text",
    "batch_indices",
    "image_batches",
    "text_batches",
]

_CIFAR10_LAYOUT = (
    "cifar-10-batches-py/ with data_batch_1 .. data_batch_5, test_batch and batches.meta "
    "(the 'CIFAR-10 python version' archive, unpacked)"
)
_CIFAR100_LAYOUT = "cifar-100-python/ with train, test and meta (the 'CIFAR-100 python version' archive, unpacked)"
_FOLDER_LAYOUT = "root/train/<class>/*.JPEG|*.jpg|*.png and root/val/<class>/... (ImageNet layout)"
_WIKITEXT_LAYOUT = (
    "wikitext-103-raw/ (or wikitext-2-raw/) with wiki.train.raw, wiki.valid.raw and wiki.test.raw, "
    "or those three files directly in the folder"
)
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


@dataclasses.dataclass(frozen=True)
class ImageDataset:
    """Images ``(N, H, W, C)`` uint8 and labels ``(N,)`` int32 for a train and a test split."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    name: str

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(H, W, C)``."""
        return tuple(self.train_x.shape[1:])


@dataclasses.dataclass(frozen=True)
class TextDataset:
    """Token-id streams (1-D, ``uint16``) for train/valid/test and the tokenizer they use."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab_size: int
    tokenizer_name: str
    name: str


# ----------------------------------------------------------------------------- CIFAR


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only builds the containers and NumPy arrays found in the CIFAR files."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
        ("copy_reg", "_reconstructor"),
        ("copyreg", "_reconstructor"),
        ("__builtin__", "object"),
        ("builtins", "object"),
    }

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR file")
        return super().find_class(module, name)


def _load_pickle(path: Path, layout: str) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"missing file {path}; expected layout: {layout}")
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(io.BytesIO(f.read()), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any failure means the file is not a CIFAR pickle
        raise ValueError(
            f"{path} is not a valid CIFAR pickle ({type(e).__name__}: {e}); expected layout: {layout}"
        ) from e
    if not isinstance(obj, dict):
        raise ValueError(f"{path} holds a {type(obj).__name__}, expected a dict; expected layout: {layout}")
    return obj


def _get(d: dict, key: bytes, path: Path, layout: str):
    for k in (key, key.decode()):
        if k in d:
            return d[k]
    found = ", ".join(repr(k) for k in d)
    raise ValueError(f"{path} has no key {key!r} (keys: {found}); expected layout: {layout}")


def _cifar_batch(path: Path, label_key: bytes, layout: str) -> tuple[np.ndarray, np.ndarray]:
    d = _load_pickle(path, layout)
    data = np.asarray(_get(d, b"data", path, layout))
    labels = np.asarray(_get(d, label_key, path, layout))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: b'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: {label_key!r} has shape {labels.shape}, expected ({data.shape[0]},)")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # channel planes R, G, B -> NHWC
    return np.ascontiguousarray(images), labels.astype(np.int32)


def _find_dir(root: Path, name: str) -> Path:
    return root if root.name == name else root / name


def _load_cifar10(root: Path) -> ImageDataset:
    d = _find_dir(root, "cifar-10-batches-py")
    meta = _load_pickle(d / "batches.meta", _CIFAR10_LAYOUT)
    names = _get(meta, b"label_names", d / "batches.meta", _CIFAR10_LAYOUT)
    parts = [_cifar_batch(d / f"data_batch_{i}", b"labels", _CIFAR10_LAYOUT) for i in range(1, 6)]
    test_x, test_y = _cifar_batch(d / "test_batch", b"labels", _CIFAR10_LAYOUT)
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    return _checked(ImageDataset(train_x, train_y, test_x, test_y, len(names), "cifar10"))


def _load_cifar100(root: Path) -> ImageDataset:
    d = _find_dir(root, "cifar-100-python")
    meta = _load_pickle(d / "meta", _CIFAR100_LAYOUT)
    names = _get(meta, b"fine_label_names", d / "meta", _CIFAR100_LAYOUT)
    train_x, train_y = _cifar_batch(d / "train", b"fine_labels", _CIFAR100_LAYOUT)
    test_x, test_y = _cifar_batch(d / "test", b"fine_labels", _CIFAR100_LAYOUT)
    return _checked(ImageDataset(train_x, train_y, test_x, test_y, len(names), "cifar100"))


def _checked(ds: ImageDataset) -> ImageDataset:
    for split, y in (("train", ds.train_y), ("test", ds.test_y)):
        if y.size and (y.min() < 0 or y.max() >= ds.num_classes):
            raise ValueError(f"{ds.name}: {split} labels lie in {y.min()}..{y.max()}, outside [0, {ds.num_classes})")
    return ds


# ----------------------------------------------------------------------------- image folder


def _read_image(path: Path, size: int) -> np.ndarray:
    from PIL import Image  # Pillow is a dependency of matplotlib

    try:
        with Image.open(path) as im:
            im = im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except Exception as e:  # noqa: BLE001 - report which file is broken
        raise ValueError(f"cannot read image {path} ({type(e).__name__}: {e})") from e


def _folder_split(split_dir: Path, classes: list[str], size: int) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for label, cls in enumerate(classes):
        cdir = split_dir / cls
        if not cdir.is_dir():
            continue
        for f in sorted(cdir.iterdir()):
            if f.suffix.lower() in _IMAGE_SUFFIXES:
                xs.append(_read_image(f, size))
                ys.append(label)
    if not xs:
        raise FileNotFoundError(f"no images in {split_dir}; expected layout: {_FOLDER_LAYOUT}")
    return np.stack(xs), np.asarray(ys, dtype=np.int32)


def _load_folder(root: Path, size: int) -> ImageDataset:
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise FileNotFoundError(f"missing folder {root / split}; expected layout: {_FOLDER_LAYOUT}")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class folders in {root / 'train'}; expected layout: {_FOLDER_LAYOUT}")
    unknown = sorted(p.name for p in (root / "val").iterdir() if p.is_dir() and p.name not in classes)
    if unknown:
        raise ValueError(f"{root / 'val'} has classes missing from train: {unknown[:5]}")
    train_x, train_y = _folder_split(root / "train", classes, size)
    test_x, test_y = _folder_split(root / "val", classes, size)
    return ImageDataset(train_x, train_y, test_x, test_y, len(classes), f"folder:{root.name}")


# ----------------------------------------------------------------------------- digits


def _load_digits(image_size: int | None, seed: int) -> ImageDataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.rint(d.images * (255.0 / 16.0)).astype(np.uint8)[..., None]  # (1797, 8, 8, 1)
    if image_size is not None and image_size != 8:
        if image_size % 8:
            raise ValueError(f"digits are 8x8: image_size must be a multiple of 8, got {image_size}")
        k = image_size // 8
        x = np.repeat(np.repeat(x, k, axis=1), k, axis=2)
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 5
    test, train = perm[:n_test], perm[n_test:]
    return ImageDataset(x[train], y[train], x[test], y[test], 10, "digits")


# ----------------------------------------------------------------------------- entry points


_IMAGE_LAYOUTS = f"{_CIFAR10_LAYOUT}; {_CIFAR100_LAYOUT}; {_FOLDER_LAYOUT}"


def _data_folder(root, layouts: str) -> Path:
    """``root`` as a ``Path`` if it is a folder; else an error that says what it is and what it should hold."""
    root = Path(root)
    if root.is_file():
        raise NotADirectoryError(f"{root} is a file, not a folder; give the folder that holds one of: {layouts}")
    if not root.is_dir():
        raise FileNotFoundError(f"data folder {root} does not exist; expected one of: {layouts}")
    return root


def _detect(root: Path) -> str:
    if root.name == "cifar-10-batches-py" or (root / "cifar-10-batches-py").is_dir():
        return "cifar10"
    if root.name == "cifar-100-python" or (root / "cifar-100-python").is_dir():
        return "cifar100"
    if (root / "train").is_dir():
        return "folder"
    raise FileNotFoundError(f"cannot recognise the data in {root}; expected one of: {_IMAGE_LAYOUTS}")


def load_images(
    root: str | os.PathLike | None = None,
    *,
    kind: str = "auto",
    image_size: int | None = None,
    seed: int = 0,
) -> ImageDataset:
    """Load an image-classification data set.

    Args:
        root: a folder holding CIFAR-10 (``cifar-10-batches-py/``), CIFAR-100 (``cifar-100-python/``)
            or an ImageNet-style tree (``train/<class>/``, ``val/<class>/``); ``None`` for the
            embedded digits.
        kind: ``"auto"`` (detect from the folder), ``"cifar10"``, ``"cifar100"``, ``"folder"`` or
            ``"digits"``.
        image_size: side length of the images. Image folders are resized to it (default 32);
            digits are upsampled by pixel repetition to it (a multiple of 8; default 8). CIFAR
            images are always 32.
        seed: the train/test split of the digits.
    """
    kinds = ("auto", "cifar10", "cifar100", "folder", "digits")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}, got {kind!r}")
    if root is None or kind == "digits":
        if root is not None:
            raise ValueError("kind='digits' is the embedded data set and takes no root folder")
        return _load_digits(image_size, seed)
    root = _data_folder(root, _IMAGE_LAYOUTS)
    kind = _detect(root) if kind == "auto" else kind
    if kind in ("cifar10", "cifar100") and image_size not in (None, 32):
        raise ValueError(f"{kind} images are 32x32; got image_size={image_size}")
    if kind == "cifar10":
        return _load_cifar10(root)
    if kind == "cifar100":
        return _load_cifar100(root)
    return _load_folder(root, 32 if image_size is None else image_size)


def _default_documents() -> list[str]:
    import pydoc_data.topics

    import sklearn.datasets

    descr = Path(sklearn.datasets.__file__).parent / "descr"
    docs = [p.read_text(encoding="utf-8") for p in sorted(descr.glob("*.rst"))]
    topics = pydoc_data.topics.topics
    docs += [topics[k] for k in sorted(topics)]
    return docs


def load_text(
    root: str | os.PathLike | None = None,
    *,
    tokenizer: ByteTokenizer = BYTE_TOKENIZER,
) -> TextDataset:
    """Load WikiText-103 / WikiText-2 (raw) from ``root``, or the embedded English corpus.

    ``root`` may be the ``wikitext-103-raw`` (or ``wikitext-2-raw``) folder, its parent, or any
    folder holding ``wiki.train.raw``, ``wiki.valid.raw`` and ``wiki.test.raw``.
    """
    if root is None:
        ids = tokenizer.encode_documents(_default_documents())
        a, b = int(0.9 * len(ids)), int(0.95 * len(ids))
        return TextDataset(ids[:a], ids[a:b], ids[b:], tokenizer.vocab_size, tokenizer.name, "default-english")
    root = _data_folder(root, _WIKITEXT_LAYOUT)
    folder, name = root, root.name
    for sub in ("wikitext-103-raw", "wikitext-2-raw"):
        if (root / sub).is_dir():
            folder, name = root / sub, sub
            break
    splits = []
    for split in ("train", "valid", "test"):
        path = folder / f"wiki.{split}.raw"
        if not path.is_file():
            raise FileNotFoundError(f"missing file {path}; expected layout: {_WIKITEXT_LAYOUT}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not UTF-8 text ({e}); expected layout: {_WIKITEXT_LAYOUT}") from e
        if not text.strip():
            raise ValueError(f"{path} is empty")
        splits.append(tokenizer.encode(text))
    return TextDataset(*splits, tokenizer.vocab_size, tokenizer.name, name)


# ----------------------------------------------------------------------------- batches


def batch_indices(num_examples: int, *, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Indices of batch number ``step``: epoch ``e = step // (num_examples // batch_size)`` visits
    a permutation seeded by ``(seed, e)`` in order, dropping the last incomplete batch.

    Pure in its arguments, so training can resume at any step without replaying earlier ones.
    """
    if batch_size < 1 or num_examples < batch_size:
        raise ValueError(f"need 1 <= batch_size <= num_examples, got {batch_size} and {num_examples}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    per_epoch = num_examples // batch_size
    epoch, pos = divmod(step, per_epoch)
    return _epoch_order(num_examples, seed, epoch)[pos * batch_size : (pos + 1) * batch_size].copy()


@functools.lru_cache(maxsize=4)
def _epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of an epoch, drawn once per epoch rather than once per step (read-only)."""
    perm = np.random.default_rng([seed, epoch]).permutation(num_examples)
    perm.flags.writeable = False
    return perm


def image_batches(
    images: np.ndarray, labels: np.ndarray, *, batch_size: int, seed: int = 0, start_step: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless ``(x, y)`` batches from step ``start_step`` on (see :func:`batch_indices`)."""
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    step = start_step
    while True:
        idx = batch_indices(len(labels), batch_size=batch_size, seed=seed, step=step)
        yield images[idx], labels[idx]
        step += 1


def text_batches(
    tokens: np.ndarray, *, batch_size: int, context: int, seed: int = 0, start_step: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless ``(inputs, targets)`` int32 batches of shape ``(batch_size, context)``.

    The stream is cut into non-overlapping windows of ``context + 1`` tokens (targets are the
    inputs shifted by one); windows are visited as in :func:`batch_indices`.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
    n_windows = (len(tokens) - 1) // context
    if n_windows < batch_size:
        raise ValueError(
            f"{len(tokens)} tokens give {n_windows} windows of context {context}, fewer than batch_size {batch_size}"
        )
    offsets = np.arange(context + 1)
    step = start_step
    while True:
        idx = batch_indices(n_windows, batch_size=batch_size, seed=seed, step=step)
        win = tokens[idx[:, None] * context + offsets].astype(np.int32)
        yield win[:, :-1], win[:, 1:]
        step += 1

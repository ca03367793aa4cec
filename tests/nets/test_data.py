"""Data loaders: real on-disk formats generated in tmp_path, embedded defaults, batches."""

import pickle

import numpy as np
import pytest

from gradflow.nets._data import (
    batch_indices,
    image_batches,
    load_images,
    load_text,
    text_batches,
)
from gradflow.nets._tokenizer import BYTE_TOKENIZER


def _cifar_dict(n, label_key, rng, n_classes):
    return {
        b"batch_label": b"synthetic",
        label_key: [int(v) for v in rng.integers(0, n_classes, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"x.png"] * n,
    }


def _dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _make_cifar10(root, rng):
    d = root / "cifar-10-batches-py"
    d.mkdir()
    batches = {}
    for i in range(1, 6):
        batches[i] = _cifar_dict(4, b"labels", rng, 10)
        _dump(d / f"data_batch_{i}", batches[i])
    _dump(d / "test_batch", _cifar_dict(3, b"labels", rng, 10))
    _dump(d / "batches.meta", {b"label_names": [b"c%d" % i for i in range(10)], b"num_vis": 3072})
    return d, batches


def test_cifar10_layout_and_pixel_order(tmp_path):
    rng = np.random.default_rng(0)
    d, batches = _make_cifar10(tmp_path, rng)
    for root in (tmp_path, d):
        ds = load_images(root)
        assert ds.name == "cifar10" and ds.num_classes == 10
        assert ds.train_x.shape == (20, 32, 32, 3) and ds.train_x.dtype == np.uint8
        assert ds.test_x.shape == (3, 32, 32, 3)
        assert ds.train_y.dtype == np.int32
    # row layout: 1024 red, then 1024 green, then 1024 blue values, each row-major 32x32
    raw = batches[1][b"data"][0]
    assert np.array_equal(ds.train_x[0, :, :, 1], raw[1024:2048].reshape(32, 32))
    assert np.array_equal(ds.train_y[:4], batches[1][b"labels"])


def test_cifar100_fine_labels(tmp_path):
    rng = np.random.default_rng(1)
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    train = _cifar_dict(5, b"fine_labels", rng, 100)
    train[b"coarse_labels"] = [0] * 5
    _dump(d / "train", train)
    _dump(d / "test", _cifar_dict(2, b"fine_labels", rng, 100))
    _dump(d / "meta", {b"fine_label_names": [b"f"] * 100, b"coarse_label_names": [b"c"] * 20})
    ds = load_images(tmp_path, kind="cifar100")
    assert ds.num_classes == 100 and ds.train_x.shape == (5, 32, 32, 3)
    assert np.array_equal(ds.train_y, train[b"fine_labels"])


def test_cifar_errors_name_the_file(tmp_path):
    rng = np.random.default_rng(2)
    d, _ = _make_cifar10(tmp_path, rng)
    (d / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3.*cifar-10-batches-py"):
        load_images(tmp_path)
    (d / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="data_batch_3"):
        load_images(tmp_path)
    _dump(d / "data_batch_3", {b"labels": [0]})
    with pytest.raises(ValueError, match="no key b'data'"):
        load_images(tmp_path)
    _dump(d / "data_batch_3", {b"labels": [0], b"data": np.zeros((1, 100), np.uint8)})
    with pytest.raises(ValueError, match=r"\(N, 3072\)"):
        load_images(tmp_path)


def test_cifar_unpickler_rejects_foreign_globals(tmp_path):
    d, _ = _make_cifar10(tmp_path, np.random.default_rng(3))
    _dump(d / "test_batch", {b"data": np.zeros((1, 3072), np.uint8), b"labels": [print]})
    with pytest.raises(ValueError, match="not allowed"):
        load_images(tmp_path)


def test_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(4)
    for split, n in (("train", 3), ("val", 1)):
        for cls in ("cat", "dog"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(n):
                arr = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
                ext = ".png" if i % 2 else ".JPEG"
                Image.fromarray(arr).save(tmp_path / split / cls / f"{i}{ext}")
    (tmp_path / "train" / "cat" / "notes.txt").write_text("ignored")
    ds = load_images(tmp_path, image_size=16)
    assert ds.num_classes == 2 and ds.train_x.shape == (6, 16, 16, 3) and ds.test_x.shape == (2, 16, 16, 3)
    assert list(ds.train_y) == [0, 0, 0, 1, 1, 1]
    (tmp_path / "val" / "bird").mkdir()
    with pytest.raises(ValueError, match="bird"):
        load_images(tmp_path, kind="folder")


def test_missing_folder_layout_message(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected one of"):
        load_images(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_images(tmp_path / "nope")


def test_digits_default():
    ds = load_images()
    assert ds.name == "digits" and ds.num_classes == 10
    assert ds.train_x.shape == (1797 - 359, 8, 8, 1) and ds.test_x.shape == (359, 8, 8, 1)
    assert ds.train_x.max() == 255
    up = load_images(image_size=32)
    assert up.train_x.shape[1:] == (32, 32, 1)
    assert np.array_equal(up.train_x[:, ::4, ::4], ds.train_x)
    with pytest.raises(ValueError, match="multiple of 8"):
        load_images(image_size=12)


def test_wikitext_layout(tmp_path):
    d = tmp_path / "wikitext-2-raw"
    d.mkdir()
    for split in ("train", "valid", "test"):
        (d / f"wiki.{split}.raw").write_text(f" = Héading {split} = \n text\n", encoding="utf-8")
    ds = load_text(tmp_path)
    assert ds.name == "wikitext-2-raw" and ds.tokenizer_name == "byte" and ds.vocab_size == 257
    assert BYTE_TOKENIZER.decode(ds.valid) == " = Héading valid = \n text\n"
    (d / "wiki.test.raw").unlink()
    with pytest.raises(FileNotFoundError, match="wiki.test.raw.*wikitext-103-raw"):
        load_text(d)


def test_default_text_is_english_and_deterministic():
    a, b = load_text(), load_text()
    assert np.array_equal(a.train, b.train)
    assert len(a.train) > 300_000 and len(a.valid) > 10_000 and len(a.test) > 10_000
    text = BYTE_TOKENIZER.decode(a.train[:200_000])
    assert text.count(" the ") > 500


def test_batches_deterministic_and_resumable():
    n, bs = 23, 5
    it = image_batches(np.arange(n), np.arange(n), batch_size=bs, seed=7)
    first = [next(it)[1] for _ in range(9)]
    resumed = image_batches(np.arange(n), np.arange(n), batch_size=bs, seed=7, start_step=6)
    for k in range(3):
        assert np.array_equal(next(resumed)[1], first[6 + k])
    # each epoch (4 batches) visits distinct examples
    epoch = np.concatenate(first[:4])
    assert len(set(epoch.tolist())) == 20
    assert not np.array_equal(
        batch_indices(n, batch_size=bs, seed=7, step=0), batch_indices(n, batch_size=bs, seed=8, step=0)
    )


def test_text_batches_shift():
    tokens = np.arange(101, dtype=np.uint16)
    x, y = next(text_batches(tokens, batch_size=4, context=10, seed=0, start_step=3))
    assert x.shape == (4, 10) and x.dtype == np.int32
    assert np.array_equal(y, x + 1)
    assert np.all(x[:, 0] % 10 == 0)
    with pytest.raises(ValueError, match="fewer than batch_size"):
        next(text_batches(tokens, batch_size=20, context=10))

"""The byte-level tokenizer: UTF-8 bytes and an end-of-text token, read back exactly."""

import numpy as np
import pytest

from gradflow.nets._tokenizer import BYTE_TOKENIZER


def test_text_round_trips_through_its_bytes():
    text = "Héading = 3 €\n"
    ids = BYTE_TOKENIZER.encode(text)
    assert ids.dtype == np.uint16 and ids.tolist() == list(text.encode("utf-8"))
    assert BYTE_TOKENIZER.decode(ids) == text
    assert (BYTE_TOKENIZER.name, BYTE_TOKENIZER.vocab_size, BYTE_TOKENIZER.eot) == ("byte", 257, 256)


def test_documents_end_with_the_end_of_text_token_read_as_a_newline():
    ids = BYTE_TOKENIZER.encode_documents(["ab", "", "c"])
    assert ids.tolist() == [97, 98, 256, 256, 99, 256] and ids.dtype == np.uint16
    assert BYTE_TOKENIZER.decode(ids) == "ab\n\nc\n"
    assert BYTE_TOKENIZER.encode_documents([]).shape == (0,)
    assert BYTE_TOKENIZER.decode([0xC3]) == "\ufffd"  # a cut UTF-8 sequence is replaced


def test_bad_input():
    with pytest.raises(TypeError, match="encode expects str, got bytes"):
        BYTE_TOKENIZER.encode(b"abc")
    with pytest.raises(ValueError, match=r"decode expects a 1-D array of ids, got shape \(1, 2\)"):
        BYTE_TOKENIZER.decode([[1, 2]])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 257\), got 0..257"):
        BYTE_TOKENIZER.decode([0, 257])

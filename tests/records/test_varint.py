import pytest
from hypothesis import given, strategies as st

from logcore.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"),
                                            (-64, b"\x7f"), (64, b"\x80\x01"), (300, b"\xd8\x04")])
def test_known_zigzag_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_extremes_use_max_length():
    assert len(encode_varint(-(1 << 31))) == 5
    assert len(encode_varlong((1 << 63) - 1)) == 10


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_varint_round_trip(value):
    data = b"\xaa" + encode_varint(value) + b"\xbb"
    assert decode_varint(data, 1) == (value, len(data) - 1)


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varlong_round_trip(value):
    data = encode_varlong(value)
    assert decode_varlong(data) == (value, len(data))


def test_overlong_and_truncated_are_rejected():
    with pytest.raises(ValueError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x01")
    with pytest.raises(ValueError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x01")
    with pytest.raises(ValueError, match="past the end"):
        decode_varint(b"\x80\x80")
    with pytest.raises(ValueError):
        encode_varint(1 << 31)

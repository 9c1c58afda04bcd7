"""The state handed over at a migration (no Ray needed): through pickle protocol 5, as Ray's
object store takes it, every tensor comes back equal, of its dtype, writable and owning its
memory, and the tensor data travels out-of-band (no copies inside the pickle)."""

from __future__ import annotations

import pickle
from collections import namedtuple

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.scheduler.live.handoff import pack, unpack

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8, torch.bool,
          torch.bfloat16]  # fmt: skip
Pair = namedtuple("Pair", "a b")


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 5), max_size=3))
    seed = draw(st.integers(0, 2**31))
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 100
    tensor = values.to(dtype)
    return tensor.t() if tensor.dim() == 2 else tensor  # non-contiguous too


leaves = st.one_of(tensors(), st.integers(), st.text(max_size=5), st.none())
trees = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.dictionaries(st.text(max_size=4), kids, max_size=4),
        st.lists(kids, max_size=4),
        st.tuples(kids, kids),
        st.builds(Pair, kids, kids),
    ),
    max_leaves=12,
)


def through_object_store(obj):
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(data, buffers=[bytes(b.raw()) for b in buffers]), len(buffers)


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        # its own writable memory: the optimizer updates momentum buffers in place
        b.add_(0) if b.dtype != torch.bool else b.logical_not_().logical_not_()
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


@settings(max_examples=60, deadline=None)
@given(trees)
def test_a_packed_state_comes_back_the_same(state):
    back, _ = through_object_store(pack(state))
    assert_same(state, unpack(back))


def test_tensor_data_travels_out_of_band():
    state = {"model": {"w": torch.randn(256, 256)}, "optimizer": {"state": {0: {
        "momentum_buffer": torch.randn(256, 256)}}}, "rng": np.random.get_state()}  # fmt: skip
    data = pickle.dumps(pack(state), protocol=5, buffer_callback=lambda b: None)
    assert len(data) < 10_000  # 512 KiB of tensors, none of it inside the pickle
    back, buffers = through_object_store(pack(state))
    assert buffers >= 2
    assert torch.equal(unpack(back)["model"]["w"], state["model"]["w"])

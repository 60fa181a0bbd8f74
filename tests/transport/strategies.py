"""Hypothesis strategies for every message type, derived from the dataclass annotations."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing

from hypothesis import strategies as st

from quorumlog.transport.codec import registered_types

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)

# What a status or admin dict may hold: anything msgpack carries and gives back equal.
wire_values = st.recursive(
    st.none()
    | st.booleans()
    | int64s
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


def _field(hint: object) -> st.SearchStrategy:
    if isinstance(hint, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return st.none() | _field(inner)
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum):
        return st.sampled_from(list(hint))
    match typing.get_origin(hint) or hint:
        case t if t is bool:
            return st.booleans()
        case t if t is int:
            return int64s
        case t if t is bytes:
            return st.binary(max_size=300)
        case t if t is str:
            return st.text(max_size=40)
        case t if t is dict:
            return st.dictionaries(st.text(max_size=10), wire_values, max_size=5)
    raise AssertionError(f"no strategy for {hint}")


def message_of(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _field(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


any_message = st.one_of([message_of(cls) for cls in registered_types()])
correlation_ids = st.integers(min_value=0, max_value=2**63 - 1)

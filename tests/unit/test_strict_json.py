"""Issue 29 point 3: `paycore.kit.strict_json` reads JSON as `json.loads` does, except that a key
repeated within one object, at any depth, is refused and named by its path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paycore.kit import strict_json
from paycore.kit.errors import DuplicateJsonKey, InvalidRequest

KEYS = st.text(max_size=8)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=30,
)


def refused(document: str | bytes) -> DuplicateJsonKey:
    with pytest.raises(DuplicateJsonKey) as caught:
        strict_json.loads(document)
    return caught.value


@given(JSON_VALUES)
def test_a_document_without_repeats_reads_as_json_loads_reads_it(value: Any) -> None:
    text = json.dumps(value)
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(text.encode()) == json.loads(text.encode())


@pytest.mark.parametrize(
    ("document", "param"),
    [
        ('{"amount_minor": 1, "amount_minor": 999999}', "amount_minor"),
        ('{"a": 1, "a": 1}', "a"),  # the same value twice is still two keys
        ('{"a": 1, "\\u0061": 2}', "a"),  # the same key, written another way
        ('{"lines": [{"amount_minor": 1, "currency": "USD", "amount_minor": 2}]}', "lines[0].amount_minor"),
        ('{"lines": [{"a": 1}, {"b": 1, "b": 2}]}', "lines[1].b"),
        ('{"beneficiary": {"iban": "DE89", "name": "x", "iban": "GB33"}}', "beneficiary.iban"),
        ('[{"x": {"y": [0, {"z": 1, "z": 2}]}}]', "[0].x.y[1].z"),
        ('{"": 1, "": 2}', ""),
    ],
)
def test_a_repeated_key_is_refused_and_named(document: str, param: str) -> None:
    error = refused(document)
    assert isinstance(error, InvalidRequest) and error.code == "duplicate_json_key"
    assert error.param == param
    assert error.message.startswith(f"{param}: ")


def test_the_outermost_repeat_is_named_first() -> None:
    assert refused('{"a": {"b": 1, "b": 2}, "a": 3}').param == "a"


def test_bytes_in_every_encoding_json_reads_are_checked() -> None:
    for encoding in ("utf-8", "utf-16", "utf-32"):
        assert refused('{"k": 1, "k": 2}'.encode(encoding)).param == "k"


def test_a_long_path_is_named_by_its_end() -> None:
    key = "k" * 10_000 + "end"
    error = refused(json.dumps({"outer": {}}).replace("{}", f'{{"{key}": 1, "{key}": 2}}'))
    assert error.param is not None and len(error.param) == strict_json.PARAM_LENGTH_MAX
    assert error.param.startswith("…kkk") and error.param.endswith("kend")


@pytest.mark.parametrize("document", ["{", '{"a": 1,}', "", "NaN-ish", b"\xff\xfe\xfd", "\ufeff{}"])
def test_what_is_not_json_is_refused_as_json_loads_refuses_it(document: str | bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(document)
    with pytest.raises(type(expected.value)):
        strict_json.loads(document)


def test_deep_nesting_reads_as_deep_as_json_loads() -> None:
    depth = 500
    document = '{"a": ' * depth + '{"z": 1, "z": 2}' + "}" * depth
    param = refused(document).param
    assert param is not None and param.endswith("a.a.z") and len(param) == strict_json.PARAM_LENGTH_MAX

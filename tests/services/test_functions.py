"""Arguments the AI passes are checked against the function's declared parameters."""

import pytest

from app.services.functions import argument_errors, example_parameters

SCHEMA = {
    "type": "object",
    "properties": {
        "orderId": {"type": "string", "description": "x"},
        "count": {"type": "integer", "description": "x"},
        "price": {"type": "number", "description": "x"},
        "express": {"type": "boolean", "description": "x"},
        "tags": {"type": "array", "description": "x", "items": {"type": "string"}},
        "extra": {"type": "object", "description": "x"},
        "size": {"type": "string", "description": "x", "enum": ["S", "M"]},
    },
    "required": ["orderId"],
}


def test_valid_arguments_have_no_errors():
    values = {
        "orderId": "A1",
        "count": 2,
        "price": 9.5,
        "express": True,
        "tags": ["a"],
        "extra": {"k": 1},
        "size": "M",
    }
    assert argument_errors(SCHEMA, values) == {}


def test_integer_counts_as_number():
    assert argument_errors(SCHEMA, {"orderId": "A1", "price": 10}) == {}


@pytest.mark.parametrize(
    ("values", "bad"),
    [
        ({}, "orderId"),
        ({"orderId": 5}, "orderId"),
        ({"orderId": "A", "count": 1.5}, "count"),
        ({"orderId": "A", "count": True}, "count"),
        ({"orderId": "A", "price": "9"}, "price"),
        ({"orderId": "A", "express": "yes"}, "express"),
        ({"orderId": "A", "tags": ["a", 1]}, "tags"),
        ({"orderId": "A", "size": "XL"}, "size"),
        ({"orderId": "A", "ghost": 1}, "ghost"),
    ],
)
def test_invalid_arguments_name_the_parameter(values, bad):
    assert list(argument_errors(SCHEMA, values)) == [bad]


def test_arguments_must_be_an_object():
    assert argument_errors(SCHEMA, ["A"]) == {"parameters": ["Must be an object."]}


def test_the_example_of_a_declaration_fits_it():
    example = example_parameters(SCHEMA)
    assert example == {
        "orderId": "",
        "count": 0,
        "price": 0,
        "express": False,
        "tags": [],
        "extra": {},
        "size": "S",
    }
    assert argument_errors(SCHEMA, example) == {}


def test_a_declaration_without_properties_has_an_empty_example():
    assert example_parameters({"type": "object"}) == {}

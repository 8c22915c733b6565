"""The tool form's schemas: τ²'s $defs resolved for the form; arguments checked as it does."""

import json

from apps.play.schemas import argument_errors, form_schema
from tau2_env.engine import episodes


def _schema(name: str, domain: str = "airline") -> dict:
    return next(t for t in episodes.tool_specs(domain) if t["name"] == name)["input_schema"]


def test_the_form_schema_has_no_references_left_in_any_domain():
    for domain in ("airline", "retail", "telecom"):
        for tool in episodes.tool_specs(domain):
            resolved = json.dumps(form_schema(tool["input_schema"]))
            assert "$ref" not in resolved and "anyOf" not in resolved, (domain, tool["name"])


def test_nested_lists_of_objects_get_their_typed_fields():
    schema = form_schema(_schema("book_reservation"))
    passenger = schema["properties"]["passengers"]["items"]
    assert schema["properties"]["passengers"]["type"] == "array"
    assert passenger["type"] == "object"
    assert set(passenger["properties"]) == {"first_name", "last_name", "dob"}
    assert passenger["required"] == ["first_name", "last_name", "dob"]
    assert schema["properties"]["cabin"]["enum"] == ["business", "economy", "basic_economy"]
    assert "user_id" in schema["required"]


def test_valid_arguments_have_no_errors():
    assert argument_errors(_schema("send_certificate"), {"user_id": "x", "amount": 150}) == {}


def test_missing_and_ill_typed_arguments_are_named_by_field():
    errors = argument_errors(
        _schema("book_reservation"),
        {"user_id": 3, "cabin": "first", "passengers": [{"first_name": "Ethan"}]},
    )
    assert errors["user_id"] == "Must be text."
    assert errors["cabin"].startswith("Must be one of: business")
    assert errors["origin"] == "Required."
    assert errors["passengers.0.last_name"] == "Required."
    assert argument_errors(_schema("send_certificate"), {"user_id": "x", "amount": "150"}) == {
        "amount": "Must be an integer."
    }
    assert argument_errors(_schema("send_certificate"), []) == {
        "__all__": "The arguments must be a JSON object."
    }

"""Function definition schemas (SPEC.md section 2, DESIGN.md sections 3 and 9).

Requests and responses have schemas of their own: a create body needs name, description,
endpoint and parameters, an update body needs nothing and has no defaults (a client sends a
body schema's defaults, which would overwrite the fields a PATCH leaves out), and a response
carries every field.
"""

from typing import Any

from marshmallow import ValidationError, fields, post_dump, validate, validates_schema

from app.resources.common import Schema, previous_secret_expires_at
from app.resources.fields import ReceiverUrl, StrictInteger, Timestamp
from app.services.functions import (
    DEFAULT_TIMEOUT_MS,
    JSON_TYPES,
    MAX_DEFINITION_BYTES,
    MAX_DESCRIPTION,
    MAX_ENUM_VALUE,
    MAX_ENUM_VALUES,
    MAX_TIMEOUT_MS,
    MIN_TIMEOUT_MS,
    enum_value_length,
)

NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class ItemTypeSchema(Schema):
    type = fields.String(
        required=True,
        validate=validate.OneOf(tuple(JSON_TYPES)),
        metadata={"description": "string, number, integer, boolean, array or object."},
    )


def short_enum_value(value: Any) -> None:
    if enum_value_length(value) > MAX_ENUM_VALUE:
        raise ValidationError(f"At most {MAX_ENUM_VALUE} characters.")


class PropertySchema(Schema):
    type = fields.String(
        required=True,
        validate=validate.OneOf(tuple(JSON_TYPES)),
        metadata={"description": "string, number, integer, boolean, array or object."},
    )
    description = fields.String(
        required=True,
        validate=validate.Length(1, 1000),
        metadata={"description": "What the value means, for the AI."},
    )
    enum = fields.List(
        fields.Raw(
            allow_none=True,
            validate=short_enum_value,
            metadata={"maxLength": MAX_ENUM_VALUE},
        ),
        validate=validate.Length(1, MAX_ENUM_VALUES),
        metadata={
            "description": f"Optional: the only values allowed, at most {MAX_ENUM_VALUES}, "
            f"each at most {MAX_ENUM_VALUE} characters (a value that is not a string: as "
            "compact JSON)."
        },
    )
    items = fields.Nested(
        ItemTypeSchema,
        metadata={
            "description": 'Optional, for arrays: the items\' type, e.g. {"type": "string"}.'
        },
    )

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        # Stored definitions are dicts, and dict.items must not pass for the "items" field.
        return (
            obj.get(attr, default)
            if isinstance(obj, dict)
            else super().get_attribute(obj, attr, default)
        )

    @validates_schema
    def check_items(self, data: dict[str, Any], **kwargs: Any) -> None:
        items = data.get("items")
        if items is None:
            return
        if data["type"] != "array":
            raise ValidationError("Only arrays have items.", "items")


def at_most_64(properties: dict[str, Any]) -> None:
    # A plain function, not validate.Length, which the document would show as maxLength.
    if len(properties) > 64:
        raise ValidationError("At most 64 parameters.")


class ParametersCreateSchema(Schema):
    """The parameters of a new function: properties and required may be left out (none)."""

    type = fields.String(
        required=True,
        validate=validate.Equal("object", error="Must be object."),
        metadata={"description": "Always object."},
    )
    properties = fields.Dict(
        keys=fields.String(validate=validate.Regexp(NAME, error="Not a valid parameter name.")),
        values=fields.Nested(PropertySchema),
        load_default=dict,
        validate=at_most_64,
        metadata={
            "description": "Parameter name (letters, digits and _, not starting with a digit) "
            "to {type, description}; at most 64.",
            "maxProperties": 64,
        },
    )
    required = fields.List(
        fields.String(),
        load_default=list,
        metadata={
            "description": "Names of the parameters the AI must always pass, each declared "
            "in properties.",
            "uniqueItems": True,
        },
    )

    @validates_schema
    def check_required(self, data: dict[str, Any], **kwargs: Any) -> None:
        required = data.get("required", [])
        undeclared = [name for name in required if name not in data.get("properties", {})]
        if undeclared:
            raise ValidationError(
                f"Not declared in properties: {', '.join(undeclared)}.", "required"
            )
        if len(set(required)) != len(required):
            raise ValidationError("Items must be unique.", "required")


DESCRIPTION_DESCRIPTION = (
    "Tells the AI what the function does. The whole definition (description, endpoint, "
    f"method, parameters, timeoutMs) is at most {MAX_DEFINITION_BYTES // 1024} KiB as compact "
    "JSON."
)
ENDPOINT_DESCRIPTION = (
    "Your https URL that the service calls: at most 2,048 characters, no user info, a host "
    "that is an IP address or a valid host name (labels of 1 to 63 characters, 253 in all), "
    "not a private or loopback one."
)
METHOD_DESCRIPTION = (
    "POST, PUT and PATCH send a JSON body; GET and DELETE send the values as query parameters."
)
TIMEOUT_DESCRIPTION = (
    f"How long your endpoint may take, in milliseconds ({MIN_TIMEOUT_MS}–{MAX_TIMEOUT_MS}), "
    "connecting (at most 1 s of it) included: its budget in live calls and in tests. A slower "
    "answer is function_timeout, and the voice runtime has its answer within the budget plus "
    "0.5 s."
)


def timeout_ms_field(**kwargs: Any) -> fields.Integer:
    return StrictInteger(validate=validate.Range(MIN_TIMEOUT_MS, MAX_TIMEOUT_MS), **kwargs)


class FunctionUpdateSchema(Schema):
    """Body of PATCH /agents/:id/functions/:name: any of the fields below; one left out keeps
    its value. The name and the signing secret stay as they are."""

    description = fields.String(
        validate=validate.Length(1, MAX_DESCRIPTION),
        metadata={"description": DESCRIPTION_DESCRIPTION},
    )
    endpoint = ReceiverUrl(ENDPOINT_DESCRIPTION)
    method = fields.String(
        validate=validate.OneOf(METHODS),
        metadata={"description": METHOD_DESCRIPTION},
    )
    parameters = fields.Nested(
        ParametersCreateSchema,
        metadata={
            "description": "JSON-Schema-like object describing the parameters; replaces the "
            "whole declaration."
        },
    )
    timeout_ms = timeout_ms_field(metadata={"description": TIMEOUT_DESCRIPTION})


class FunctionCreateSchema(Schema):
    """Body of POST /agents/:id/functions."""

    name = fields.String(
        required=True,
        validate=validate.Regexp(NAME, error="Letters, digits and _, not starting with a digit."),
        metadata={"description": "Unique per agent; the path key when deleting."},
    )
    description = fields.String(
        required=True,
        validate=validate.Length(1, MAX_DESCRIPTION),
        metadata={"description": DESCRIPTION_DESCRIPTION},
    )
    endpoint = ReceiverUrl(ENDPOINT_DESCRIPTION, required=True)
    method = fields.String(
        load_default="POST",
        validate=validate.OneOf(METHODS),
        metadata={"description": METHOD_DESCRIPTION + " Default POST."},
    )
    parameters = fields.Nested(
        ParametersCreateSchema,
        required=True,
        metadata={"description": "JSON-Schema-like object describing the parameters."},
    )
    timeout_ms = timeout_ms_field(
        load_default=DEFAULT_TIMEOUT_MS,
        metadata={"description": TIMEOUT_DESCRIPTION + f" Default {DEFAULT_TIMEOUT_MS}."},
    )
    secret = fields.String(
        load_only=True,
        validate=validate.Length(16, 256),
        metadata={
            "description": "Optional signing secret (16–256 characters); generated if absent."
        },
    )


class ParametersSchema(Schema):
    """A function's parameters in a response: every field, always."""

    type = fields.String(
        required=True, metadata={"description": "Always object.", "enum": ["object"]}
    )
    properties = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(PropertySchema),
        required=True,
        dump_default=dict,
        metadata={"description": "Parameter name to {type, description}."},
    )
    required = fields.List(
        fields.String(),
        required=True,
        dump_default=list,
        metadata={"description": "Names of the parameters the AI must always pass."},
    )


class FunctionDefinitionSchema(Schema):
    """A function's definition, as a response and an agent's version show it: never its
    secret."""

    name = fields.String(required=True, metadata={"description": "Unique per agent."})
    description = fields.String(
        required=True, metadata={"description": "Tells the AI what the function does."}
    )
    endpoint = fields.String(
        required=True, metadata={"description": "The URL that the service calls."}
    )
    method = fields.String(
        required=True,
        metadata={"description": "The HTTP method of the calls.", "enum": METHODS},
    )
    parameters = fields.Nested(
        ParametersSchema,
        required=True,
        metadata={"description": "JSON-Schema-like object describing the parameters."},
    )
    timeout_ms = fields.Integer(
        required=True,
        metadata={"description": "The endpoint's budget in milliseconds, in live calls and tests."},
    )


class FunctionSchema(FunctionDefinitionSchema):
    """A function in a response: every field, always, and never the signing secret."""

    created_at = Timestamp(required=True)
    previous_secret_expires_at = previous_secret_expires_at()


class FunctionCreatedSchema(FunctionSchema):
    """A function just created, with its signing secret (shown only here and when rotated)."""

    signing_secret = fields.String(
        required=True,
        metadata={
            "description": "Key of the X-Service-Signature HMAC on invocations. Shown only here."
        },
    )


class FunctionSecretSchema(FunctionSchema):
    """A function whose signing secret was just rotated, with the new secret: shown only here."""

    signing_secret = fields.String(
        required=True,
        metadata={
            "description": "The new key of the X-Service-Signature HMAC on invocations. Shown "
            "only here."
        },
    )


class FunctionListSchema(Schema):
    functions = fields.List(fields.Nested(FunctionSchema), required=True)


class FunctionTestSchema(Schema):
    """Body of POST /agents/:id/functions/:name/test."""

    parameters = fields.Dict(
        load_default=dict,
        metadata={
            "description": "Values for the function's declared parameters, as the AI would "
            "pass them; checked against the declaration first. Default {}."
        },
    )


class FunctionErrorSchema(Schema):
    """Why a function gave no result: in a test's answer and in a live call's (the runtime's)."""

    code = fields.String(
        required=True,
        metadata={
            "description": "unknown_function, invalid_parameters, function_timeout, "
            "function_http_error, function_invalid_response or function_unreachable; in a "
            "live call also function_busy (the tenant's calls already take their share of the "
            "function workers: the endpoint was not called)."
        },
    )
    message = fields.String(required=True, metadata={"description": "What went wrong."})


class FunctionTestResultSchema(Schema):
    """What a function test found: the outcome a live call would have had, and its timing."""

    ok = fields.Boolean(
        required=True,
        metadata={"description": "True when the endpoint answered a 2xx with a JSON object."},
    )
    status_code = fields.Integer(
        required=True,
        allow_none=True,
        metadata={
            "description": "The endpoint's HTTP status; null when it gave none (invalid "
            "parameters, a timeout, an unreachable endpoint)."
        },
    )
    duration_ms = fields.Integer(
        required=True,
        metadata={
            "description": "Milliseconds the test took, from checking the parameters to the "
            "answer: what a live call would have waited (queueing, connecting and the "
            "endpoint's answer)."
        },
    )
    budget_ms = fields.Integer(
        required=True,
        metadata={"description": "The function's timeoutMs: the budget it was held to."},
    )
    result = fields.Dict(
        metadata={"description": "The endpoint's JSON object, when ok (no error key then)."}
    )
    error = fields.Nested(
        FunctionErrorSchema,
        metadata={"description": "Why there is no result, when not ok (no result key then)."},
    )

    @post_dump
    def result_or_error(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """One of result and error, never both, never null (as a live call's answer)."""
        drop = "error" if data.get("ok") else "result"
        return {key: value for key, value in data.items() if key != drop}

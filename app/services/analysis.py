"""Post-call analysis plans (DESIGN.md section 17): what an agent asks of its calls'
analysis, validated; the structured-output schema Gemini is asked to answer with, built from
a plan; and the check of an answer against the plan.

A plan is kept as the API shows it: `{"summary": bool, "fields": [{"name", "type",
"description", "choices" (enum only), "required"}], "successCriteria"?: text}`.
"""

import math
import re
from typing import Any

from app.errors import ValidationFailed
from app.models.agents import default_plan

DEFAULT_PLAN: dict[str, Any] = default_plan()
FIELD_TYPES = ("string", "number", "boolean", "enum")
MAX_FIELDS = 20
MAX_CHOICES = 50
MAX_CHOICE_LENGTH = 100
MAX_DESCRIPTION = 1_000
MAX_CRITERIA = 2_000
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
PLAN_KEYS = ("summary", "fields", "successCriteria")
FIELD_KEYS = ("name", "type", "description", "choices", "required")
UNKNOWN = "Unknown field."


def _field_errors(index: int, entry: Any, seen: set[str]) -> dict[str, list[str]]:
    """What is wrong with one entry of fields (by its key), nothing when it is valid."""
    if not isinstance(entry, dict):
        return {"_schema": ["Must be an object with name and type."]}
    errors: dict[str, list[str]] = {key: [UNKNOWN] for key in entry if key not in FIELD_KEYS}
    name = entry.get("name")
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        errors["name"] = [
            "Required: a name of letters, digits and _ (1–64, not starting with a digit)."
        ]
    elif name in seen:
        errors["name"] = [f"Another field is named {name} already."]
    else:
        seen.add(name)
    kind = entry.get("type")
    if kind not in FIELD_TYPES:
        errors["type"] = [f"Required: one of {', '.join(FIELD_TYPES)}."]
    description = entry.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        errors["description"] = [f"Must be text of at most {MAX_DESCRIPTION:,} characters."]
    if not isinstance(entry.get("required", False), bool):
        errors["required"] = ["Must be true or false."]
    choices = entry.get("choices")
    if kind == "enum":
        if (
            not isinstance(choices, list)
            or not 1 <= len(choices) <= MAX_CHOICES
            or not all(
                isinstance(choice, str) and 1 <= len(choice) <= MAX_CHOICE_LENGTH
                for choice in choices
            )
            or len(set(choices)) != len(choices)
        ):
            errors["choices"] = [
                f"An enum field needs choices: 1–{MAX_CHOICES} distinct texts of 1–"
                f"{MAX_CHOICE_LENGTH} characters."
            ]
    elif choices is not None and kind in FIELD_TYPES:
        errors["choices"] = ["Only an enum field has choices."]
    return errors


def validate_plan(plan: Any) -> dict[str, Any]:
    """The plan as it is kept (every key of a field present, defaults filled in), or
    ValidationFailed whose details name each wrong key under analysisPlan (an entry of fields
    by its index, as marshmallow names a list's items)."""
    errors = plan_errors(plan)
    if errors:
        raise ValidationFailed("Invalid value for analysisPlan.", details={"analysisPlan": errors})
    fields = [
        {
            "name": entry["name"],
            "type": entry["type"],
            "description": entry.get("description", ""),
            **({"choices": list(entry["choices"])} if entry["type"] == "enum" else {}),
            "required": entry.get("required", False),
        }
        for entry in plan.get("fields", [])
    ]
    clean: dict[str, Any] = {"summary": plan.get("summary", True), "fields": fields}
    if plan.get("successCriteria"):
        clean["successCriteria"] = plan["successCriteria"]
    return clean


def plan_errors(plan: Any) -> dict[str, Any]:
    """What is wrong with a plan, by key (marshmallow's shape of messages); {} when valid."""
    if not isinstance(plan, dict):
        return {"_schema": ["Must be an object: {summary, fields, successCriteria}."]}
    errors: dict[str, Any] = {key: [UNKNOWN] for key in plan if key not in PLAN_KEYS}
    if not isinstance(plan.get("summary", True), bool):
        errors["summary"] = ["Must be true or false."]
    criteria = plan.get("successCriteria")
    if criteria is not None and (not isinstance(criteria, str) or len(criteria) > MAX_CRITERIA):
        errors["successCriteria"] = [f"Must be text of at most {MAX_CRITERIA:,} characters."]
    fields = plan.get("fields", [])
    if not isinstance(fields, list):
        errors["fields"] = ["Must be a list of fields."]
    elif len(fields) > MAX_FIELDS:
        errors["fields"] = [f"At most {MAX_FIELDS} fields."]
    else:
        seen: set[str] = set()
        by_index = {
            str(index): found
            for index, entry in enumerate(fields)
            if (found := _field_errors(index, entry, seen))
        }
        if by_index:
            errors["fields"] = by_index
    return errors


# The OpenAPI subset Gemini's structured output takes (responseSchema), by field type.
GEMINI_TYPES = {"string": "STRING", "number": "NUMBER", "boolean": "BOOLEAN", "enum": "STRING"}


def response_schema(plan: dict[str, Any]) -> dict[str, Any]:
    """The responseSchema of the request for a plan: the summary (when the plan asks for
    one), the verdict with its reason, and the plan's fields under `fields` (an OBJECT must
    have properties, so it is left out when the plan has none)."""
    properties: dict[str, Any] = {}
    if plan.get("summary", True):
        properties["summary"] = {
            "type": "STRING",
            "description": "A short summary of the call, in the call's language.",
        }
    properties["successful"] = {
        "type": "BOOLEAN",
        "description": "Whether the call reached its goal (see the success criteria).",
    }
    properties["successReason"] = {
        "type": "STRING",
        "description": "Why the call is judged successful or not, in one sentence.",
    }
    if plan["fields"]:
        field_properties: dict[str, Any] = {}
        for field in plan["fields"]:
            entry: dict[str, Any] = {"type": GEMINI_TYPES[field["type"]]}
            if field["description"]:
                entry["description"] = field["description"]
            if field["type"] == "enum":
                entry["enum"] = list(field["choices"])
            if not field["required"]:
                entry["nullable"] = True
            field_properties[field["name"]] = entry
        fields_schema: dict[str, Any] = {"type": "OBJECT", "properties": field_properties}
        required = [field["name"] for field in plan["fields"] if field["required"]]
        if required:
            fields_schema["required"] = required
        properties["fields"] = fields_schema
    return {"type": "OBJECT", "properties": properties, "required": list(properties)}


class AnswerInvalid(Exception):
    """The model's answer does not fit the plan; the message says how."""


def _value_error(field: dict[str, Any], value: Any) -> str | None:
    kind = field["type"]
    if kind == "string" and not isinstance(value, str):
        return "is not text"
    if kind == "boolean" and not isinstance(value, bool):
        return "is not true or false"
    if kind == "number" and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        return "is not a number"
    if kind == "enum" and value not in field["choices"]:
        return f"is not one of {', '.join(field['choices'])}"
    return None


def check_answer(plan: dict[str, Any], answer: Any) -> dict[str, Any]:
    """The answer's summary, successful, successReason and fields, checked against the plan:
    AnswerInvalid naming the first thing that does not fit (a value of the wrong type or
    outside its choices, a required field missing). An optional field left out is None."""
    if not isinstance(answer, dict):
        raise AnswerInvalid("The answer is not a JSON object.")
    summary = answer.get("summary")
    if plan.get("summary", True) and not isinstance(summary, str):
        raise AnswerInvalid("The answer has no summary.")
    successful = answer.get("successful")
    if not isinstance(successful, bool):
        raise AnswerInvalid("successful is not true or false.")
    reason = answer.get("successReason")
    if not isinstance(reason, str):
        raise AnswerInvalid("The answer has no successReason.")
    given = answer.get("fields") or {}
    if not isinstance(given, dict):
        raise AnswerInvalid("fields is not an object.")
    values: dict[str, Any] = {}
    for field in plan["fields"]:
        value = given.get(field["name"])
        if value is None:
            if field["required"]:
                raise AnswerInvalid(f"The required field {field['name']} is missing.")
            values[field["name"]] = None
            continue
        problem = _value_error(field, value)
        if problem:
            raise AnswerInvalid(
                f"The field {field['name']} ({field['type']}) {problem}: {value!r}."
            )
        values[field["name"]] = value
    return {
        "summary": summary if plan.get("summary", True) else None,
        "successful": successful,
        "successReason": reason,
        "fields": values,
    }

"""The analysisPlan of an agent in requests and responses (DESIGN.md section 17): documented
by its schemas, validated by app.services.analysis.validate_plan (one place for its rules,
which the dashboard's form uses too)."""

from typing import Any

from marshmallow import ValidationError, fields, validate

from app.errors import ValidationFailed
from app.resources.common import Schema
from app.services import analysis


class AnalysisFieldSchema(Schema):
    name = fields.String(
        required=True,
        metadata={
            "description": "The field's key in the analysis' fields: letters, digits and _ "
            "(1–64, not starting with a digit), unique in the plan.",
            "pattern": f"^{analysis.FIELD_NAME.pattern}$",
        },
    )
    type = fields.String(
        required=True,
        metadata={"description": "What the value is.", "enum": analysis.FIELD_TYPES},
    )
    description = fields.String(
        validate=validate.Length(max=analysis.MAX_DESCRIPTION),
        metadata={
            "description": "What to extract, for the model (at most 1,000 characters; "
            "default empty)."
        },
    )
    choices = fields.List(
        fields.String(validate=validate.Length(1, analysis.MAX_CHOICE_LENGTH)),
        validate=validate.Length(1, analysis.MAX_CHOICES),
        metadata={
            "uniqueItems": True,
            "description": "An enum field's values: 1–50 distinct texts of 1–100 characters "
            "(only for type enum, required for it).",
        },
    )
    required = fields.Boolean(
        metadata={
            "description": "Whether an analysis without this value fails (default false: "
            "the value is null when the call did not say)."
        }
    )


class AnalysisPlanSchema(Schema):
    summary = fields.Boolean(
        metadata={"description": "Whether the analysis writes a summary (default true)."}
    )
    fields_ = fields.List(
        fields.Nested(AnalysisFieldSchema),
        validate=validate.Length(max=analysis.MAX_FIELDS),
        data_key="fields",
        attribute="fields",
        metadata={"description": "The values to extract from each call: at most 20."},
    )
    success_criteria = fields.String(
        attribute="successCriteria",
        allow_none=True,
        validate=validate.Length(max=analysis.MAX_CRITERIA),
        metadata={
            "description": "What makes a call successful, for the model's verdict (at most "
            "2,000 characters; absent: whether the call reached the goal its prompt sets)."
        },
    )


class AnalysisPlanField(fields.Nested):
    """analysisPlan in a body: documented as AnalysisPlanSchema, loaded by validate_plan."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(AnalysisPlanSchema, **kwargs)

    def _deserialize(  # type: ignore[override]
        self, value: Any, attr: Any, data: Any, **kwargs: Any
    ) -> dict[str, Any]:
        try:
            return analysis.validate_plan(value)
        except ValidationFailed as exc:
            raise ValidationError(exc.details["analysisPlan"]) from None

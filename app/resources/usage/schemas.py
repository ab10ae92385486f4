"""Usage schemas: the report of a range of days and its query parameters."""

from marshmallow import fields

from app.resources.calls.schemas import CostBreakdownRecordSchema
from app.resources.common import Schema
from app.services.usage import MAX_DAYS


class UsageDate(fields.Date):
    default_error_messages = {"invalid": "Not an ISO 8601 date (YYYY-MM-DD)."}


class UsageQueryArgsSchema(Schema):
    from_ = UsageDate(
        metadata={
            "description": "The first day counted, by the day calls started (UTC); default: "
            "the first day of this month."
        },
    )
    to = UsageDate(
        metadata={
            "description": "The day after the last day counted (exclusive, as GET /calls' "
            "to); default: the first day of next month. After from, and at most "
            f"{MAX_DAYS} days from it."
        }
    )


class UsageDaySchema(Schema):
    date = fields.Date(required=True, metadata={"description": "The UTC day."})
    calls = fields.Integer(required=True, metadata={"description": "Calls started that day."})
    billed_minutes = fields.Integer(
        required=True,
        metadata={"description": "Minutes charged for them."},
    )
    ai_cost_idr = fields.Integer(required=True, metadata={"description": "Their AI cost in IDR."})


class UsageSchema(Schema):
    active_calls = fields.Integer(
        required=True,
        metadata={"description": "Calls in progress now (admitted and not yet ended)."},
    )
    concurrent_call_limit = fields.Integer(
        required=True,
        metadata={
            "description": "Calls that may be in progress at once; a start beyond it is "
            "refused with concurrency_limit."
        },
    )
    rate_limit_per_minute = fields.Integer(
        required=True,
        metadata={"description": "API requests per minute for the tenant (all keys together)."},
    )
    from_ = fields.Date(required=True, metadata={"description": "The first day counted."})
    to = fields.Date(required=True, metadata={"description": "The day after the last day counted."})
    calls = fields.Integer(
        required=True, metadata={"description": "Calls started in the range, refused ones too."}
    )
    answered_calls = fields.Integer(
        required=True,
        metadata={"description": "Of those, the calls the agent answered."},
    )
    billed_minutes = fields.Integer(required=True, metadata={"description": "Minutes charged."})
    ai_cost_idr = fields.Integer(required=True, metadata={"description": "AI cost in IDR."})
    cost_breakdown = fields.Nested(
        CostBreakdownRecordSchema,
        required=True,
        metadata={
            "description": "aiCostIdr by component; a call reported without a breakdown counts "
            "in other, so the components add up to aiCostIdr."
        },
    )
    analysis_cost_idr = fields.Integer(
        required=True,
        metadata={
            "description": "What the post-call analyses of those calls cost, IDR (requests to "
            "the analysis model; never billed, and not part of aiCostIdr)."
        },
    )
    days = fields.List(
        fields.Nested(UsageDaySchema),
        required=True,
        metadata={"description": "Every day of the range in order, days without calls too."},
    )

"""Credit schemas: the balance and the ledger of minute movements."""

from marshmallow import fields, validate

from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.fields import Timestamp
from app.services.billing import TRANSACTION_TYPES


class CreditBalanceSchema(Schema):
    balance_minutes = fields.Integer(
        required=True,
        metadata={
            "description": "Minutes left; below zero only when a call talked beyond its "
            "allowance (by at most that excess)."
        },
    )
    reserved_minutes = fields.Integer(
        required=True,
        metadata={"description": "Minutes held by calls in progress, released when they end."},
    )
    available_minutes = fields.Integer(
        required=True,
        metadata={
            "description": "balanceMinutes less reservedMinutes: what new calls may hold. "
            "A call starts only while it is above zero."
        },
    )
    lifetime_purchased_minutes = fields.Integer(
        required=True,
        metadata={"description": "All minutes purchased."},
    )
    lifetime_used_minutes = fields.Integer(
        required=True,
        metadata={"description": "All minutes charged for calls."},
    )
    low_balance_threshold_minutes = fields.Integer(
        attribute="low_balance_threshold",
        required=True,
        metadata={"description": "credits.low fires when a charge takes the balance below it."},
    )


class CreditTransactionSchema(Schema):
    id = fields.String(required=True, metadata={"description": "ctx_…"})
    type = fields.String(
        required=True,
        metadata={
            "description": "purchase, usage, adjustment or refund.",
            "enum": TRANSACTION_TYPES,
        },
    )
    minutes = fields.Integer(required=True, metadata={"description": "Signed: usage is negative."})
    balance_after = fields.Integer(
        required=True,
        metadata={"description": "The balance after this movement."},
    )
    call_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The charged call, or null."},
    )
    description = fields.String(
        required=True, metadata={"description": "What the movement was for."}
    )
    created_at = Timestamp(required=True)


class CreditTransactionListSchema(Schema):
    transactions = fields.List(fields.Nested(CreditTransactionSchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class CreditTransactionQueryArgsSchema(PageArgsSchema):
    type = fields.String(
        validate=validate.OneOf(TRANSACTION_TYPES),
        metadata={"description": "Only this type of movement.", "enum": TRANSACTION_TYPES},
    )

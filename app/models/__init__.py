"""The peewee models by domain. Times are naive UTC; ids are prefixed random strings
(app.util.new_id)."""

from app.models.agents import Agent, AgentVersion, FunctionDefinition
from app.models.audit import AuditEntry
from app.models.billing import CreditTransaction
from app.models.calls import Call, CallTurn
from app.models.campaigns import Campaign, CampaignContact
from app.models.events import Delivery, DeliveryAttempt, Event, Webhook
from app.models.fields import JSONField, RotatedSecret, id_field
from app.models.functions import Function, FunctionInvocation
from app.models.idempotency import IdempotencyKey
from app.models.phone_numbers import CallPermission, PhoneNumber
from app.models.tenants import ApiKey, Tenant, User, UserSession
from app.models.whatsapp import WhatsAppAccount

# Each table after those it refers to: the order to load them in, the reverse to empty them.
ALL_MODELS = [
    Tenant,
    ApiKey,
    User,
    UserSession,
    Agent,
    AgentVersion,
    FunctionDefinition,
    WhatsAppAccount,
    PhoneNumber,
    CallPermission,
    Campaign,
    CampaignContact,
    Call,
    CallTurn,
    CreditTransaction,
    Event,
    Webhook,
    Delivery,
    DeliveryAttempt,
    Function,
    FunctionInvocation,
    AuditEntry,
    IdempotencyKey,
]

__all__ = [
    "ALL_MODELS",
    "Agent",
    "AgentVersion",
    "ApiKey",
    "AuditEntry",
    "Call",
    "CallPermission",
    "CallTurn",
    "Campaign",
    "CampaignContact",
    "CreditTransaction",
    "Delivery",
    "DeliveryAttempt",
    "Event",
    "Function",
    "FunctionDefinition",
    "FunctionInvocation",
    "IdempotencyKey",
    "JSONField",
    "PhoneNumber",
    "RotatedSecret",
    "Tenant",
    "User",
    "UserSession",
    "Webhook",
    "WhatsAppAccount",
    "id_field",
]

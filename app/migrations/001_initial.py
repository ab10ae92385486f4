"""Initial schema: every table of app/models.py as first released."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    @migrator.create_model
    class Tenant(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        name = pw.CharField(max_length=100, unique=True)
        plan = pw.CharField(default="starter", max_length=20)
        rate_limit = pw.IntegerField(null=True)
        low_balance_threshold = pw.IntegerField(default=10)
        balance_minutes = pw.BigIntegerField(default=0)
        lifetime_purchased_minutes = pw.BigIntegerField(default=0)
        lifetime_used_minutes = pw.BigIntegerField(default=0)
        calls_count = pw.BigIntegerField(default=0)
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "tenant"

    @migrator.create_model
    class Agent(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        name = pw.CharField(max_length=100)
        system_prompt = pw.TextField()
        voice_id = pw.CharField(default="Puck", max_length=16)
        greeting_text = pw.TextField(default="")
        language = pw.CharField(default="id", max_length=16)
        max_call_duration_minutes = pw.IntegerField(default=10)
        tools_enabled = pw.TextField()
        is_active = pw.BooleanField(default=True)
        escalation_number = pw.CharField(max_length=16, null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()
        deleted_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "agent"
            indexes = [(("tenant", "deleted_at", "created_at"), False)]

    @migrator.create_model
    class ApiKey(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        name = pw.CharField(max_length=100)
        prefix = pw.CharField(max_length=16)
        key_hash = pw.CharField(max_length=64, unique=True)
        created_at = pw.DateTimeField()
        last_used_at = pw.DateTimeField(null=True)
        revoked_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "api_key"

    @migrator.create_model
    class PhoneNumber(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        display_number = pw.CharField(max_length=16, unique=True)
        label = pw.CharField(default="", max_length=100)
        is_active = pw.BooleanField(default=True)
        agent = pw.ForeignKeyField(
            column_name="agent_id",
            field="id",
            model=migrator.orm["agent"],
            null=True,
            on_delete="SET NULL",
        )
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "phone_number"
            indexes = [(("tenant", "created_at"), False)]

    @migrator.create_model
    class Call(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        phone_number = pw.ForeignKeyField(
            column_name="phone_number_id",
            field="id",
            model=migrator.orm["phone_number"],
            null=True,
            on_delete="SET NULL",
        )
        agent = pw.ForeignKeyField(
            column_name="agent_id",
            field="id",
            model=migrator.orm["agent"],
            null=True,
            on_delete="SET NULL",
        )
        provider_call_id = pw.CharField(max_length=128, null=True)
        caller_number = pw.CharField(max_length=32)
        callee_number = pw.CharField(max_length=32)
        direction = pw.CharField(default="inbound", max_length=16)
        status = pw.CharField(default="ringing", max_length=16)
        started_at = pw.DateTimeField()
        answered_at = pw.DateTimeField(null=True)
        ended_at = pw.DateTimeField(null=True)
        duration_seconds = pw.IntegerField(null=True)
        talk_time_seconds = pw.IntegerField(null=True)
        hangup_reason = pw.CharField(max_length=64, null=True)
        hangup_initiator = pw.CharField(max_length=32, null=True)
        transcript_summary = pw.TextField(null=True)
        ai_cost_idr = pw.BigIntegerField(null=True)
        metadata = pw.TextField()
        billed_minutes = pw.IntegerField(null=True)
        function_calls_count = pw.IntegerField(default=0)
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "call"
            indexes = [
                (("tenant", "provider_call_id"), True),
                (("tenant", "started_at", "id"), False),
                (("tenant", "status", "started_at", "id"), False),
                (("tenant", "agent", "started_at", "id"), False),
                (("tenant", "phone_number", "started_at", "id"), False),
                (("tenant", "direction", "started_at", "id"), False),
            ]

    @migrator.create_model
    class CreditTransaction(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        type = pw.CharField(max_length=16)
        minutes = pw.BigIntegerField()
        balance_after = pw.BigIntegerField()
        call = pw.ForeignKeyField(
            column_name="call_id",
            field="id",
            model=migrator.orm["call"],
            null=True,
            on_delete="SET NULL",
        )
        description = pw.CharField(default="", max_length=255)
        idempotency_key = pw.CharField(max_length=128, null=True, unique=True)
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "credit_transaction"
            indexes = [
                (("tenant", "created_at", "id"), False),
                (("tenant", "type", "created_at", "id"), False),
            ]

    @migrator.create_model
    class Webhook(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        url = pw.CharField(max_length=2048)
        events = pw.TextField()
        secret = pw.CharField(max_length=256)
        is_active = pw.BooleanField(default=True)
        disabled_reason = pw.CharField(max_length=255, null=True)
        failing_since = pw.DateTimeField(null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "webhook"
            indexes = [(("tenant", "created_at"), False)]

    @migrator.create_model
    class Event(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        type = pw.CharField(max_length=32)
        data = pw.TextField()
        created_at = pw.DateTimeField()

        class Meta:
            table_name = "event"
            indexes = [(("tenant", "created_at"), False), (("created_at",), False)]

    @migrator.create_model
    class Delivery(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        webhook = pw.ForeignKeyField(
            column_name="webhook_id", field="id", model=migrator.orm["webhook"], on_delete="CASCADE"
        )
        event = pw.ForeignKeyField(
            column_name="event_id", field="id", model=migrator.orm["event"], on_delete="CASCADE"
        )
        status = pw.CharField(default="pending", max_length=16)
        attempts = pw.IntegerField(default=0)
        next_attempt_at = pw.DateTimeField(null=True)
        lease_until = pw.DateTimeField(null=True)
        last_status_code = pw.IntegerField(null=True)
        last_error = pw.TextField(null=True)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()
        completed_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "delivery"
            indexes = [(("status", "next_attempt_at"), False), (("webhook", "created_at"), False)]

    @migrator.create_model
    class DeliveryAttempt(pw.Model):
        id = pw.AutoField()
        delivery = pw.ForeignKeyField(
            column_name="delivery_id",
            field="id",
            model=migrator.orm["delivery"],
            on_delete="CASCADE",
        )
        number = pw.IntegerField()
        attempted_at = pw.DateTimeField()
        duration_ms = pw.IntegerField(null=True)
        status_code = pw.IntegerField(null=True)
        error = pw.TextField(null=True)
        response_excerpt = pw.TextField(null=True)

        class Meta:
            table_name = "delivery_attempt"
            indexes = [(("delivery", "number"), False), (("attempted_at",), False)]

    @migrator.create_model
    class Function(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        agent = pw.ForeignKeyField(
            column_name="agent_id", field="id", model=migrator.orm["agent"], on_delete="CASCADE"
        )
        name = pw.CharField(max_length=64)
        description = pw.TextField(default="")
        endpoint = pw.CharField(max_length=2048)
        method = pw.CharField(default="POST", max_length=8)
        parameters = pw.TextField()
        signing_secret = pw.CharField(max_length=256)
        created_at = pw.DateTimeField()
        updated_at = pw.DateTimeField()

        class Meta:
            table_name = "function"
            indexes = [(("agent", "name"), True)]

    @migrator.create_model
    class FunctionInvocation(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id", field="id", model=migrator.orm["tenant"], on_delete="CASCADE"
        )
        call = pw.ForeignKeyField(
            column_name="call_id", field="id", model=migrator.orm["call"], on_delete="CASCADE"
        )
        function = pw.ForeignKeyField(
            column_name="function_id",
            field="id",
            model=migrator.orm["function"],
            null=True,
            on_delete="SET NULL",
        )
        function_name = pw.CharField(max_length=64)
        parameters = pw.TextField()
        status = pw.CharField(default="pending", max_length=16)
        result = pw.TextField(null=True)
        error_code = pw.CharField(max_length=64, null=True)
        error_message = pw.TextField(null=True)
        http_status = pw.IntegerField(null=True)
        latency_ms = pw.IntegerField(null=True)
        created_at = pw.DateTimeField()
        completed_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "function_invocation"
            indexes = [(("call", "created_at"), False)]


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("function_invocation")

    migrator.remove_model("function")

    migrator.remove_model("delivery_attempt")

    migrator.remove_model("delivery")

    migrator.remove_model("event")

    migrator.remove_model("webhook")

    migrator.remove_model("credit_transaction")

    migrator.remove_model("call")

    migrator.remove_model("phone_number")

    migrator.remove_model("api_key")

    migrator.remove_model("agent")

    migrator.remove_model("tenant")

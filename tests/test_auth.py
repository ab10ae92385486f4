"""API keys: hashed at rest, several per tenant, revocation on the next request."""

from datetime import timedelta

from app.models import ApiKey
from app.services import keys as key_service
from tests.helpers import assert_error


def test_key_has_documented_shape(api_key):
    assert api_key.startswith("dkl_") and len(api_key) == 44


def test_key_is_stored_only_hashed(tenant, api_key):
    stored = ApiKey.get(ApiKey.tenant == tenant)
    assert api_key not in (stored.key_hash, stored.prefix, stored.name)
    assert stored.key_hash == key_service.hash_key(api_key)


def test_several_keys_work_for_one_tenant(client, tenant, headers):
    _, second = key_service.create_key(tenant=tenant, name="staging")
    assert client.get("/api/v1/agents", headers=headers).status_code == 200
    assert client.get("/api/v1/agents", headers={"x-api-key": second}).status_code == 200


def test_revoked_key_is_refused_on_next_request(client, tenant, api_key, headers):
    assert client.get("/api/v1/agents", headers=headers).status_code == 200
    record = ApiKey.get(ApiKey.key_hash == key_service.hash_key(api_key))
    key_service.revoke_key(key_id=record.id)
    assert_error(client.get("/api/v1/agents", headers=headers), 401, "unauthorized")


def test_last_used_is_written_at_most_once_a_minute(client, api_key, headers):
    record_query = ApiKey.select().where(ApiKey.key_hash == key_service.hash_key(api_key))
    assert record_query.get().last_used_at is None
    client.get("/api/v1/agents", headers=headers)
    first = record_query.get().last_used_at
    assert first is not None
    client.get("/api/v1/agents", headers=headers)
    assert record_query.get().last_used_at == first
    ApiKey.update(last_used_at=first - timedelta(minutes=2)).execute()
    client.get("/api/v1/agents", headers=headers)
    assert record_query.get().last_used_at > first - timedelta(minutes=2)

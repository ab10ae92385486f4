"""Credits: the balance, and the ledger with its filters and pagination."""

import pytest

from app.services import billing
from tests.call_flow import whole_call
from tests.helpers import ACTOR, assert_error


def test_balance_of_a_new_tenant(client, headers):
    response = client.get("/api/v1/credits", headers=headers)
    assert response.status_code == 200
    assert response.json == {
        "balanceMinutes": 0,
        "reservedMinutes": 0,
        "availableMinutes": 0,
        "lifetimePurchasedMinutes": 0,
        "lifetimeUsedMinutes": 0,
        "lowBalanceThresholdMinutes": 10,
    }


def test_balance_after_purchases_and_calls(client, headers, runtime_headers, did, tenant):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=20)
    whole_call(client, runtime_headers, did, talkTimeSeconds=121)
    assert client.get("/api/v1/credits", headers=headers).json == {
        "balanceMinutes": 117,
        "reservedMinutes": 0,
        "availableMinutes": 117,
        "lifetimePurchasedMinutes": 120,
        "lifetimeUsedMinutes": 3,
        "lowBalanceThresholdMinutes": 10,
    }


def test_transactions_newest_first_with_fields(client, headers, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did, talkTimeSeconds=30)
    response = client.get("/api/v1/credits/transactions", headers=headers)
    assert response.status_code == 200
    body = response.json
    assert body["pagination"] == {"total": 2, "limit": 50, "offset": 0, "hasMore": False}
    usage, purchase = body["transactions"]
    assert list(usage) == [
        "id",
        "type",
        "minutes",
        "balanceAfter",
        "callId",
        "description",
        "createdAt",
    ]
    assert usage["id"].startswith("ctx_") and usage["createdAt"].endswith("Z")
    assert (usage["type"], usage["minutes"], usage["balanceAfter"], usage["callId"]) == (
        "usage",
        -1,
        99,
        call_id,
    )
    assert call_id in usage["description"]
    assert (purchase["type"], purchase["minutes"], purchase["balanceAfter"]) == (
        "purchase",
        100,
        100,
    )
    assert purchase["callId"] is None


def test_transactions_filter_by_type_and_paginate(client, headers, tenant):
    for minutes in (1, 2, 3):
        billing.grant(actor=ACTOR, tenant=tenant, minutes=minutes)
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-1)
    page = client.get("/api/v1/credits/transactions?type=purchase&limit=2", headers=headers).json
    assert [entry["minutes"] for entry in page["transactions"]] == [3, 2]
    assert page["pagination"] == {"total": 3, "limit": 2, "offset": 0, "hasMore": True}
    page = client.get(
        "/api/v1/credits/transactions?type=purchase&limit=2&offset=2", headers=headers
    ).json
    assert [entry["minutes"] for entry in page["transactions"]] == [1]
    assert page["pagination"]["hasMore"] is False
    adjustments = client.get("/api/v1/credits/transactions?type=adjustment", headers=headers).json
    assert [entry["balanceAfter"] for entry in adjustments["transactions"]] == [5]


def test_other_tenants_ledger_is_not_shown(client, other_headers, tenant):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=5)
    body = client.get("/api/v1/credits/transactions", headers=other_headers).json
    assert body["transactions"] == [] and body["pagination"]["total"] == 0
    assert client.get("/api/v1/credits", headers=other_headers).json["balanceMinutes"] == 0


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("offset=-5", "offset"), ("type=gift", "type")],
)
def test_bad_transaction_query_is_422(client, headers, query, field):
    response = client.get(f"/api/v1/credits/transactions?{query}", headers=headers)
    assert list(assert_error(response, 422, "validation_error")["details"]) == [field]


def test_credits_need_an_api_key(client):
    assert_error(client.get("/api/v1/credits"), 401, "unauthorized")
    assert_error(client.get("/api/v1/credits/transactions"), 401, "unauthorized")

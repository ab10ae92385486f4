"""The OpenAPI document: valid, secured, every error response and field documented."""

import re

from openapi_spec_validator import validate


def spec(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json


def test_openapi_document_is_valid(client):
    validate(spec(client))


def test_docs_page_is_served_with_its_own_assets(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200 and b"swagger" in response.data.lower()
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.get_data(as_text=True))
    assert len(assets) == 3  # the CSS and two scripts, none from another host
    for url in assets:
        assert url.startswith("/static/swagger-ui/")
        with client.get(url) as asset:
            assert asset.status_code == 200 and len(asset.data) > 1000, url
    assert client.get("/static/swagger-ui/../../app/config.py").status_code == 404


def test_the_document_holds_the_api_and_health_checks_not_the_pages(client):
    paths = set(spec(client)["paths"])
    assert {path for path in paths if not path.startswith(("/api/v1/", "/internal/v1/"))} == {
        "/healthz",
        "/readyz",
    }
    assert not paths & {"/", "/api/v1/docs", "/api/v1/docs/", "/api/v1/openapi.json"}


def test_every_tenant_operation_is_secured_and_documents_errors(client):
    document = spec(client)
    assert document["components"]["securitySchemes"]["ApiKeyAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "A tenant API key (dkl_…), created with `flask keys create`.",
    }
    for path, operations in document["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if method == "parameters":
                continue
            responses = operation["responses"]
            assert operation["security"] == [{"ApiKeyAuth": []}], (method, path)
            assert {"401", "429", "default"} <= set(responses), (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415", "422"} <= set(responses), (method, path)
            assert operation.get("summary"), (method, path)


def test_error_schema_is_the_documented_body(client):
    error = spec(client)["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]


def test_every_schema_field_is_described(client):
    undescribed = []
    for name, schema in spec(client)["components"]["schemas"].items():
        for field, prop in schema.get("properties", {}).items():
            if "description" not in prop and "$ref" not in prop and prop.get("type") != "array":
                undescribed.append(f"{name}.{field}")
    assert not undescribed


def test_rate_limit_headers_and_429_are_documented(client):
    document = spec(client)
    assert "Rate limits" in document["info"]["description"]
    rate_limited = document["components"]["responses"]["RATE_LIMITED"]
    assert set(rate_limited["headers"]) == {
        "Retry-After",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    }
    listing = document["paths"]["/api/v1/agents"]["get"]["responses"]
    assert listing["429"] == {"$ref": "#/components/responses/RATE_LIMITED"}
    assert "X-RateLimit-Reset" in listing["200"]["headers"]

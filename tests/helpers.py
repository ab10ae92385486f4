"""Assertions shared by the tests."""


def assert_error(response, status: int, code: str) -> dict:
    """Assert the documented error body and return its error object (of a test client's
    response, or of a requests response from a real server)."""
    real = not hasattr(response, "get_json")
    text = response.text if real else response.get_data(as_text=True)
    assert response.status_code == status, text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json() if real else response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details", "requestId"}
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert error["requestId"] == response.headers["X-Request-Id"]
    return error

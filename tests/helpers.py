"""Assertions shared by the tests."""


def assert_error(response, status: int, code: str) -> dict:
    """Assert the documented error body and return its error object."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details", "requestId"}
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert error["requestId"] == response.headers["X-Request-Id"]
    return error

"""Swagger UI's own files for the docs page (/api/v1/docs), served from the swagger-ui-bundle
package, so the page works on a machine without internet access."""

from flask import Blueprint, Response, send_from_directory
from swagger_ui_bundle import swagger_ui_path

ASSETS_URL = "/static/swagger-ui/"  # OPENAPI_SWAGGER_UI_URL's default

blp = Blueprint("docs_assets", __name__)


@blp.get(ASSETS_URL + "<path:filename>")
def asset(filename: str) -> Response:
    return send_from_directory(swagger_ui_path, filename, max_age=24 * 3600)

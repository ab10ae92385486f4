"""The docs page (/api/v1/docs): Swagger UI's own files, served from the swagger-ui-bundle
package so the page works on a machine without internet access, and the ways to it."""

from flask import Blueprint, Response, redirect, send_from_directory
from swagger_ui_bundle import swagger_ui_path
from werkzeug.wrappers import Response as BaseResponse

ASSETS_URL = "/static/swagger-ui/"  # OPENAPI_SWAGGER_UI_URL's default
DOCS_URL = "/api/v1/docs"  # OPENAPI_URL_PREFIX and OPENAPI_SWAGGER_UI_PATH

blp = Blueprint("docs_assets", __name__)


@blp.get(ASSETS_URL + "<path:filename>")
def asset(filename: str) -> Response:
    return send_from_directory(swagger_ui_path, filename, max_age=24 * 3600)


@blp.get(DOCS_URL + "/")
def docs_with_slash() -> BaseResponse:
    return redirect(DOCS_URL, code=308)

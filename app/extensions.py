"""Unbound extension singletons, bound to the app in create_app."""

from flask_smorest import Api

from app.errors import ErrorSchema


class VoiceApi(Api):
    # Documents the error body that app.errors renders for every error.
    ERROR_SCHEMA = ErrorSchema


api = VoiceApi()

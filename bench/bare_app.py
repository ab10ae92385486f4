"""The baseline: bare Flask JSON endpoints, served by the same gunicorn settings.

/bare answers a list of agents. The runtime routes (for bench/capacity.py) answer trivial
JSON without a database, queue or validation; a function call posts to BARE_FUNCTION_URL
inline (one keep-alive session per thread) and answers the endpoint's JSON as its result.
"""

import os
import threading
import uuid

import requests
from flask import Flask, jsonify, request

app = Flask(__name__)

AGENTS = [
    {"id": f"agent_{i:020d}", "name": f"Agent {i}", "systemPrompt": "Be brief.", "voiceId": "Puck"}
    for i in range(5)
]
FUNCTION_URL = os.environ.get("BARE_FUNCTION_URL", "")
sessions = threading.local()


@app.get("/bare")
def bare():
    return jsonify({"agents": AGENTS})


@app.post("/internal/v1/calls")
def start_call():
    return jsonify({"id": f"call_{uuid.uuid4().hex[:20]}", "status": "ringing"}), 201


@app.post("/internal/v1/calls/<call_id>/<step>")
def call_step(call_id: str, step: str):
    return jsonify({"id": call_id, "step": step})


@app.post("/internal/v1/calls/<call_id>/function-calls")
def function_call(call_id: str):
    if not hasattr(sessions, "session"):
        sessions.session = requests.Session()
    answer = sessions.session.post(FUNCTION_URL, json=request.get_json(), timeout=5)
    return jsonify({"result": answer.json()})


@app.get("/api/v1/calls")
def list_calls():
    return jsonify({"data": [], "total": 0, "limit": 50, "offset": 0, "hasMore": False})

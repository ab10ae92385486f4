"""The baseline: a bare Flask JSON endpoint, served by the same gunicorn settings."""

from flask import Flask, jsonify

app = Flask(__name__)

AGENTS = [
    {"id": f"agent_{i:020d}", "name": f"Agent {i}", "systemPrompt": "Be brief.", "voiceId": "Puck"}
    for i in range(5)
]


@app.get("/bare")
def bare():
    return jsonify({"agents": AGENTS})

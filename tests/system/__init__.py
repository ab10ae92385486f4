"""Tests that start processes: gunicorn, worker.py, nginx, Redis servers, a browser."""

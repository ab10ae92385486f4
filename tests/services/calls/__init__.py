"""Tests of app/services/calls/."""

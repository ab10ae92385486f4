"""Tests of app/services/deliveries/."""

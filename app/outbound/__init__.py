"""Outgoing HTTP to tenant URLs: the address policy (SSRF), the deadline transport, the sender."""

"""Campaigns: batches of outbound calls."""

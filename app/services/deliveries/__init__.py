"""Webhook deliveries: fair dispatch, signed attempts, the retry schedule, the sweeper, the log."""

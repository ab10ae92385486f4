"""A voice runtime for the Voice Agent API: the runtime API client and a Pipecat bridge.

A distribution of its own (voiceagent-bridge, `pip install ./bridge`): the service never
imports it.
"""

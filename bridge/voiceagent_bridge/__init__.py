"""A voice runtime for the Voice Agent API: the runtime API client, a Pipecat bridge, and the
glue of Twilio Media Streams.

A distribution of its own (voiceagent-bridge, `pip install ./bridge`): the service never
imports it.
"""

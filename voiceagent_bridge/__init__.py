"""A voice runtime for the Voice Agent API: the runtime API client and a Pipecat bridge.

`voiceagent_bridge.client` needs only aiohttp; `voiceagent_bridge.bridge` and the example bot
`voiceagent_bridge.twilio_bot` need Pipecat (`pip install -e '.[pipecat]'`).
"""

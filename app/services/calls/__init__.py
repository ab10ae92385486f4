"""Calls: admission, the lifecycle the runtime reports, outbound dispatch and the history."""

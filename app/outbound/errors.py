"""The errors of an outgoing request, all under OutboundError."""


class OutboundError(Exception):
    """Base of every error of an outgoing request."""


class UnsafeURL(OutboundError):
    """The URL is not allowed: scheme, user info, length, an invalid host or a blocked one."""


class BlockedAddress(UnsafeURL):
    """The host is, or resolves to, a private, loopback, link-local or reserved address."""


class OutboundTimeout(OutboundError):
    """The receiver did not connect or answer in time."""


class OutboundConnectionError(OutboundError):
    """The receiver could not be resolved or reached, or TLS failed."""

"""The personas once, for every transport: generators that yield commands (``protocol``) to a driver."""

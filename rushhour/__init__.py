"""rushhour: rushhour."""

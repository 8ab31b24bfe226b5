"""rushhour: audit."""

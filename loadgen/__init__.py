"""rushhour: loadgen."""

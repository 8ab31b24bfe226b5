"""rushhour studies: many runs in, results out (knee, plan, boundary, compare, repeat, history, sweep grids)."""

"""What every layer shares: schema, types, partitioning, predicates, clock, errors; imports nothing of ours."""

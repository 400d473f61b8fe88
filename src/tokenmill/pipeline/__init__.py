"""The machinery every stage shares: config, document schema, stage contract, commits, and the Ray runner."""

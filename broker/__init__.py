"""The tool broker: tiers, the policy engine, argument handling and result shaping."""

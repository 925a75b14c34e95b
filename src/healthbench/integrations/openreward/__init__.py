"""HealthBench as OpenReward environments, served by one server (`healthbench serve`)."""

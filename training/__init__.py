"""Training runs: environments, rollouts and trainers."""

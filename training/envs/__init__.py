"""Environments for agent rollouts (ALFWorld and others)."""

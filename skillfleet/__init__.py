"""skillfleet: Agent Skills for LLM agents, run safely across a fleet of machines."""

__version__ = "0.1.0"

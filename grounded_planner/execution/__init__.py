"""Primitive executor, safety envelope and robot backends."""

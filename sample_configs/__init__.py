"""Sample job configs, shipped as package data (read them with importlib.resources)."""

"""Execution and analysis engines. Framework imports live only in engines.adapters.<framework>."""

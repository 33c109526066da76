"""Pydantic models for every probe-tui job. No framework, no engine, no UI imports here."""

"""Framework adapters. Importing this package imports no framework."""

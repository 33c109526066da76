"""Widgets shared by the app's views: a virtual table for millions of rows, text charts."""

"""The app's screens, each in its own module with its ``.tcss`` beside it."""

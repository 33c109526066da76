"""config_check: a training setup's fingerprint (a pack) and the diff of two (docs/CONFIG_CHECK.md)."""

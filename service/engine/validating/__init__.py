"""validating."""

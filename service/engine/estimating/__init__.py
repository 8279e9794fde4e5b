"""estimating."""

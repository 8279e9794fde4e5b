"""deciding."""

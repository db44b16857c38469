"""Task families, each a registered Gymnasium env."""

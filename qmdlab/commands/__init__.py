"""CLI verbs, one module per area; each exposes ``register(group: click.Group)``."""

"""One driver module per engine; each runs as ``python -m engines.<name> SCENARIO CONFIG_JSON``."""

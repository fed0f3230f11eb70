"""Command-line interface: ``ibp-graph compress | decompress | inspect``."""

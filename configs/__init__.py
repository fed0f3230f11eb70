"""Run configs (YAML), shipped as package data."""

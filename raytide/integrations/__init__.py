"""Integrations with Spark (through RayDP) and Ray Data. Imports nothing eagerly: the dependencies are heavy."""

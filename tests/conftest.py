"""Shared test configuration: the simulated-cluster fixtures and markers (tests/simfixtures.py)."""
pytest_plugins = ["tests.simfixtures"]

"""Fixtures for the evaluation tests: real OpenAI-compatible model servers come from the serving tests."""

from tests.serving.conftest import scripted_server  # noqa: F401  (a fixture: judge models over real HTTP)

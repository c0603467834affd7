"""The one error every evolution service raises, apart so that callers and each service module can name it
without importing the others (a refusal here is the user's to fix, so views and the API show its message)."""


class EvolutionError(ValueError):
    """A request evolution refuses, with a message for the user."""

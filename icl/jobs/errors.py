"""The error a wrong config raises, in a module of its own so that every layer (config, sweep,
plan, the CLI) can raise and catch it without importing another."""


class ConfigError(ValueError):
    """A setting in the config is wrong; the message names it."""

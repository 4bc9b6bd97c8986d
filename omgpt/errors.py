"""Errors a user can cause. The CLI turns them into one line on stderr and exit code 2."""


class OMGPTError(ValueError):
    """Bad input from the user: unknown task or policy, bad option, mismatched checkpoint, ..."""

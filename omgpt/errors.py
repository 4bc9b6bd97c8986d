"""Errors a user can cause. The CLI turns them into one line on stderr and exit code 2."""


class OMGPTError(ValueError):
    """Bad input from the user: unknown task or policy, bad option, mismatched checkpoint, ...

    The message is one line, whatever it was built from (a library's multi-line message passed on, a
    value's repr): its lines are joined with "; ", so that the Python API says what the CLI says."""

    def __init__(self, message: object = ""):
        lines = [line.strip() for line in str(message).splitlines() if line.strip()]
        super().__init__("; ".join(lines))

"""The one exception type for errors a user can cause and fix."""


class MindflowError(Exception):
    """A problem with input, configuration or state that the user can act on.

    The message says what went wrong and what to do; the CLI prints it on one
    line and exits non-zero, without a traceback.
    """

"""The one exception type for errors a user can cause and fix."""


class MindflowError(Exception):
    """A problem with input, configuration or state that the user can act on.

    The message says what went wrong and what to do; the CLI prints it on one
    line and exits non-zero, without a traceback.
    """


class NotFound(MindflowError):
    """Something asked for by id does not exist (or belongs to another being): HTTP 404."""


class Conflict(MindflowError):
    """The request contradicts the current state, e.g. deciding a proposal already decided: HTTP 409."""


class OutsideWorkspace(MindflowError):
    """A path that leaves the being's workspace folder, or names no file it may read: HTTP 400."""

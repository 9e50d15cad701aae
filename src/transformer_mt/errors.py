"""The one exception type for user mistakes (bad config, bad corpus, missing run files).

The CLI turns a `UserError` into a one-line message and exit code 2; anything else is a
bug and keeps its traceback."""


class UserError(ValueError):
    """A mistake the user can fix; the message says what is wrong, where, and what to do."""

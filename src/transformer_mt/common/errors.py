"""The exception types for user mistakes (bad config, bad corpus, missing run files).

The CLI turns any of `USER_ERRORS` into a one-line message and exit code 2 (the server
into a JSON error); anything else is a bug and keeps its traceback."""

from transformer_mt.common.config import ConfigError


class UserError(ValueError):
    """A mistake the user can fix; the message says what is wrong, where, and what to do."""


class TrainingDiverged(UserError):
    """The loss or the weights stopped being finite; nothing of that step was saved."""


USER_ERRORS = (UserError, ConfigError)  # ConfigError lives in common/config.py, which imports nothing of the package

"""The error a message that cannot be written raises."""

_PREFIX = "courier: message."


class ValidationError(ValueError):
    """One bad field of a message, and how to fix it.

    ``str(error)`` is the text Courier's Go outbox Writer gives for the same
    message: ``courier: message.FIELD PROBLEM: FIX``, after ``outbox: `` when
    write or schedule raised it, and ``outbox: message I of N: `` when it
    was the I-th of N messages.

    Attributes:
        field: the offending field, such as ``Topic`` or
            ``Headers["x-bad name"]`` (Go's field names, as in the contract).
        problem: what is wrong with it, such as ``is empty``.
        fix: what to do about it.
        index: the message's position (1-based) among those written in
            one call, or None.
        count: how many messages that call wrote, or None.
    """

    def __init__(self, field, problem, fix, index=None, count=None, outbox=False):
        self.field = field
        self.problem = problem
        self.fix = fix
        self.index = index
        self.count = count
        self.outbox = outbox
        super().__init__(self._text())

    @property
    def validation_text(self):
        """The text without the Writer's prefix: ``courier: message.…``."""
        if self.fix:
            return "%s%s %s: %s" % (_PREFIX, self.field, self.problem, self.fix)
        return "%s%s %s" % (_PREFIX, self.field, self.problem)

    def _text(self):
        text = self.validation_text
        if not self.outbox:
            return text
        if self.count is not None and self.count > 1:
            return "outbox: message %d of %d: %s" % (self.index, self.count, text)
        return "outbox: " + text

    def in_write(self, index, count):
        """The same error as the Writer reports it for message index of count."""
        return ValidationError(self.field, self.problem, self.fix, index, count, outbox=True)

"""The one error type the plugin raises for bad input.

Every message is one line that names what was wrong (a file, a field, a target name) and, where
there is a short list of valid choices, lists them. The command-line tool prints the message alone,
without a traceback; library callers can catch :class:`FusionHWError`.
"""


class FusionHWError(ValueError):
    """Bad input to tvm_fusion_hw: a missing or malformed file, an unknown target, a bad knob."""

    def __init__(self, message: str):
        # Keep the message on one line: it is printed as-is by the CLI.
        super().__init__(" ".join(str(message).split()))

"""``python -m riskrank``: the ``riskrank`` command, for a client that starts it by the
interpreter's path (``riskrank wrap`` writes that when no ``riskrank`` script is on PATH)."""

from riskrank.cli import entry

entry()

"""Post-mortem of log files (``ddptui diagnose``): reading, timestamps and ranks,
merging many files in time order, classification with the signature knowledge base.
Core layer: imports neither textual nor asyncssh."""

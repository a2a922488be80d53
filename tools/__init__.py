"""Command-line tools over what a run wrote (`python -m tools.<name>`)."""

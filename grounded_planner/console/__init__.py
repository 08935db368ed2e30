"""The operator console: a web page served by the stack to watch, instruct, approve, stop and label."""

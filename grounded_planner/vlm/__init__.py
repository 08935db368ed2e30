"""VLM backends, prompts per model family, and parsing of raw model text into plans."""

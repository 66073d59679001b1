"""The agent loop, approval and episode records."""

"""``holodesk eval``: task success and click accuracy of a policy, measured on this machine (docs/evaluation.md)."""

"""Pure domain types: actions, geometry, risk. No Qt, no torch, no OS calls."""

"""Pure domain types: actions, geometry, risk, safe display of untrusted text. No Qt, no torch, no OS calls."""

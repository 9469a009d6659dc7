"""People in paycore (issue 28): operators with roles, their console sessions, sign-in limits."""

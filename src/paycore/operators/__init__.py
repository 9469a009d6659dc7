"""People in paycore: operators with roles, their console sessions, sign-in limits."""

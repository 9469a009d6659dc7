"""Entry points that replay a list of requests against a throwaway database, as the HTTP API
would answer them: controllers, like `http/` and `cli/`, that call domain services only.
`refunds.handle` is SPEC §7.2's (a contract, reached as `paycore.refunds.handle`)."""

"""The thin edge of the money endpoints (ADR 0026, decision 4): a Starlette route per money
endpoint, matched ahead of FastAPI's route for the same path and method, inside the same
middleware. It reads a well-formed body once and answers it without FastAPI's per-request
machinery; any other body is handed to the FastAPI route, whose answers (and OpenAPI
declaration) stay what they were."""

from tests.integration.webhooks.support import env

__all__ = ["env"]

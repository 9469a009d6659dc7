"""Building blocks: money, ids, clock, errors (standard library only), and in schemas.py
the Pydantic types every domain's API shapes share."""

"""Standard-library-only building blocks: money, ids, clock, errors."""

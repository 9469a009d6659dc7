"""Manual resolution (ADR 0016): settling by hand, with four eyes, an item no
evidence will settle."""

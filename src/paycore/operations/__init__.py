"""Operations (SPEC §12): what the console's front page and `/metrics` show about the
whole system — work waiting on other systems, worker lag, breaks, money defects caught after
the fact — read through each domain's service. A read model: it changes nothing."""

"""Monitoring (SPEC §12): what operations staff watch. The console's front page and `/metrics`
show the whole system — work waiting on other systems, worker lag, breaks, money defects
caught after the fact — read through each domain's service. A read model: it changes nothing."""

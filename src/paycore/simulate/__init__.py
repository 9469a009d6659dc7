"""`paycore simulate`: the two-service refund flow of SPEC §8, run as named scenarios."""

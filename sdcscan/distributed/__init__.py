"""Distributed runs: one rank per unit, collectives checked bit for bit, blame per hop and per rank."""

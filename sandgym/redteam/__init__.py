"""`sandgym redteam`: the attack catalogue as a product that scores any
harness. run.py plays every family's attacks (the family table's
`redteam` field) on a seeded sample of tasks against the targets asked for
and counts what got through; report.py renders the table."""

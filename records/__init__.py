"""rushhour records: what a run folder holds before the audit (the record contract, run.json, the columnar sidecar)."""

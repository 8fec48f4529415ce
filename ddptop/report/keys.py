"""Summary keys renamed in schema version 2, where each lives in the document, and the version 1 names.

``ddptop.report.store.load_summary`` renames them in a version 1 document, so every reader asks for the
current names alone. Keep the old names here and nowhere else.
"""

from __future__ import annotations

# current name -> the name a version 1 summary used, for the keys of each scaling row
ROW_RENAMED = {
    "comm_estimate_from_t1_s": "seed002_comm_estimate_s",
    "bandwidth_from_t1_gbs": "seed002_bandwidth_gbs",
}
# ... and for the keys of a scaling row's "epoch"
EPOCH_RENAMED = {
    "grad_bytes_per_epoch": "seed004_bytes_per_epoch",
    "grad_values_per_epoch": "seed004_parameters_per_epoch",
}
RENAMED = {**ROW_RENAMED, **EPOCH_RENAMED}

"""The files of a stored run's folder, by name: what the store writes and what the read side
looks for beside a report it is given (is this report a store run's?).

Plain names, no imports: a command given one report file checks for a manifest beside it
without importing the store (``ncuflow.read.runs``); the store itself (``ncuflow.store``)
takes its names from here.
"""

REPORT_NAME = "report.ncu-rep"
MANIFEST_NAME = "manifest.json"
LOG_NAME = "ncu.log"

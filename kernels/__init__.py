"""The study's kernel cells (see ``ncuflow.cells`` for the interface and the spec grammar).

Each public module here declares one cell (``CELL``) or several (``CELLS``); modules whose
names start with ``_`` hold the shared helpers and the Triton kernels and are imported
only when a cell is built, so listing the cells never imports torch or triton.

- ``copy_bandwidth``   device-to-device copy: the measured DRAM ceiling
- ``flat_decode``      token-flat decode attention, one KV index per token
- ``paged_decode``     page-aware decode attention reading a block table
- ``plan_host``        host-side decode planning over index lengths (host clock)
- ``flashinfer_cells`` FlashInfer's decode wrapper and its ``plan()``, when flashinfer imports
- ``xqa_cells``        FlashInfer's XQA decode (page size compiled in), when flashinfer imports

Each cell's parameters are one frozen dataclass in ``_params`` (``build`` receives it, typed).
"""

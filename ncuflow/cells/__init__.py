"""Kernel cells: the registry, the spec grammar and the interface a cell implements.

A *cell* is the smallest decisive GPU workload of the study (a copy, a decode attention
kernel, a host-side planner), registered by name with typed parameters and defaults.
This package knows the cells only through their declarations; it never imports torch or
triton at module level, so ``ncuflow cells`` works on a machine without them.

Spec grammar (what ``ncuflow profile`` / ``ncuflow time`` take)::

    spec   := CELL [ ":" assign ( "," assign )* ]
    assign := NAME "=" VALUE

e.g. ``paged_decode:page=16,kv=shared,batch=32,kv_len=8192``. Parameters left out take
their defaults; values are checked against the parameter's type (int, float, str, bool:
``true``/``false``/``1``/``0``/``yes``/``no``) and its choices. ``CellSpec.text()`` is
the canonical form: every parameter, sorted by name.

Declaring a cell (built-in ones live in the ``kernels`` package; users put ``.py`` files
in a folder and pass ``--cells-dir DIR``): a module defines ``CELL`` (one
``CellDefinition``) or ``CELLS`` (a sequence of them) at module level::

    from ncuflow.cells import CellDefinition, ParamSpec

    def build(params, device):          # params: name -> typed value (or a CellParams dataclass); device: "cuda"
        import torch                    # heavy imports inside build, never at module level
        ...
        return MyInstance(...)          # an object following the CellInstance protocol

    CELL = CellDefinition(
        name="my_cell",
        params=(ParamSpec("n", int, 1 << 20, None, "elements"),),
        description="what it measures",
        build=build,
        requires=("torch", "triton", "cuda"),   # what must be present for it to run
    )

``CellInstance`` (what ``build`` returns) has ``run()`` (the timed launch, asynchronous
on the GPU), ``output()`` (the result of the last ``run()``), ``reference()`` (the
same result computed by plain torch), ``expected_bytes`` (the bytes the operation must
move at least) and ``representation()`` (a JSON-able dict of what reaches the timed
operation: shapes, index-list length, page-table length, the effective page size...).
``build`` allocates and fills every tensor; warm-up is done by the runner, outside the
NVTX range ``ncuflow/<cell>``.
"""


from ncuflow.cells.contract import (
    CellDefinition,
    CellInfo,
    CellInstance,
    CellParams,
    CellSpec,
    ParamSpec,
    coerce_value,
    format_value,
    nvtx_range_name,
    nvtx_range_stack,
    param,
)

# The API for cell authors (``from ncuflow.cells import CellDefinition, ParamSpec``): the contract
# alone, so that the store, which names runs by their CellSpec, and the read side below it import
# no registry (which asks the machine about its GPU). Finding cells is ``ncuflow.cells.registry``.
__all__ = ["CellDefinition", "CellInfo", "CellInstance", "CellParams", "CellSpec", "ParamSpec", "coerce_value",
           "format_value", "nvtx_range_name", "nvtx_range_stack", "param"]

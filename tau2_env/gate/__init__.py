"""The gate in front of the engine: who may open a session, how many, and where.

``access`` (credentials, budgets), ``capacity`` and ``shared_slots`` (sessions per
process, across processes and across hosts), ``guard`` (request limits), ``arguments``
(tool argument limits), ``hf_identity`` (Hub tokens) and ``session_router`` (several
OpenEnv processes behind one port). Imports the engine, never the faces.
"""

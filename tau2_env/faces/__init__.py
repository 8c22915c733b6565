"""The faces an agent or a trainer meets: OpenEnv, MCP, TRL, and their client.

``server`` (the standalone ASGI app), ``openenv_env``, ``mcp_server``,
``agent_session`` (one agent's episode as the faces drive it), ``trl_environment``,
``training_data``, ``client`` and ``ci_gate`` (``tau2-gate``: an evaluation started
and judged from CI, standard library only). The top layer: nothing in tau2_env imports it.
"""

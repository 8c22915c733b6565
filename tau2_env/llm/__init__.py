"""The door every LLM call goes through, and the seam to τ² and litellm.

``gateway`` routes each chat call to the conversation's provider; ``llm_args`` holds the
LLM arguments; ``compat`` is every use of τ²'s, litellm's and openai's private
internals (version-checked); ``outbound`` the policy on where calls may go;
``wire`` the direct path's HTTP/1.1 client; ``_tau2`` imports τ² quietly, once;
``tau2_gen`` builds τ²'s parts, one module per τ² generation (0.2 and ≥ 1.0.1).
Imports only the shared ground (config, versions, jsonbounds).
"""

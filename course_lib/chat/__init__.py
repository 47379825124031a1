"""Chapter 17's chat: the template (roles, end-of-turn tokens, the assistant-only mask), a safe
calculator, conversations made by code, the engine (KV cache across turns, streaming, the
calculator loop), its scores, and the terminal and web chats."""

"""Memory agents: the MemBuilder constructor (four roles over one chat model)."""

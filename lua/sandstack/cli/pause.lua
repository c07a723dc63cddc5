-- sandstack pause NAME: freeze every container of one stack (docs/lifecycle.md).
return require("sandstack.cli_lifecycle").simple("pause", "paused", 60, "freeze every container of a stack (memory kept)",
  [[Every container is frozen at once (the engine's pause); processes keep their memory and open
connections. A client that connects meanwhile waits until resume.]])

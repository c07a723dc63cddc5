-- sandstack pause NAME: freeze every service of one stack (docs/lifecycle.md).
return require("sandstack.cli_lifecycle").simple("pause", "paused", 60, "freeze every service of a stack (memory kept)",
  [[Every service is frozen at once (the engine's pause); processes keep their memory and open
connections. The forwarder and the added proxy keep running: a client that connects meanwhile
waits until resume.]])

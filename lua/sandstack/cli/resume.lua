-- sandstack resume NAME: thaw a paused stack (docs/lifecycle.md).
return require("sandstack.cli_lifecycle").simple("resume", "resumed", 61, "thaw every service of a paused stack")
